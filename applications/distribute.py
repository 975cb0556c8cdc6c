"""``tf.distribute`` strategies for training, evaluation and tuning.

    strategy = make_strategy("mirrored")          # default | mirrored | multiworker | tpu
    with strategy.scope():
        model = compile_model(build_model())      # variables are created under the strategy
    batch = global_batch_size(32, strategy)       # 32 per replica x replicas in sync
    model.fit(distribute_dataset_options(train_ds.batch(batch)), ...)

Batch sizes: every ``--batch-size`` of the command line is **per replica**. Datasets
are batched with the *global* batch ``per_replica x strategy.num_replicas_in_sync``;
Keras' ``fit`` hands each replica its slice. Learning rates are not rescaled.

Strategies:

* ``default``: the default (no-op) strategy, one device.
* ``mirrored``: ``MirroredStrategy`` over every GPU, or over every logical CPU when
  there is no GPU (and several logical CPUs are configured, as in the tests).
* ``multiworker``: ``MultiWorkerMirroredStrategy``; the cluster comes from the
  ``TF_CONFIG`` environment variable, as usual (a :class:`StrategyError` when it is
  unset or names no cluster). Must be created before any other
  TensorFlow op runs in the process (the command line does so). Creating it installs
  :func:`install_keras_fixes`, without which Keras' ``fit`` and ``evaluate``
  fail under it (for every model: no call site has to prepare its model). Every worker runs the
  same command; only the chief writes into ``--run-dir``, the others into
  ``--run-dir/workers/<type>-<index>`` (see :func:`output_dir`).
* ``tpu``: ``TPUStrategy`` through ``TPUClusterResolver`` (``tpu`` names the TPU, or
  empty for the one attached to this VM). A :class:`StrategyError` (one line from the
  command line) when no TPU is reachable.

Uneven batches: Keras (3.15) averages the replicas' mean losses whatever the number of
examples each replica holds, so a batch that does not split evenly over the replicas
(the last, partial batch of an epoch: 3 examples on 2 replicas go 2 + 1) trains with a
wrong gradient (the example alone on its replica weighs twice the others; a batch of 1
makes half the one-device step). Every application therefore passes its training batches
through :func:`even_batches`: each is cut to the largest multiple of the replicas (at most
``replicas - 1`` examples of each partial batch left out: one per epoch, or one per
length bucket for the bucketed text sets; other ones every epoch when the data is
reshuffled; with a global batch the replicas do not divide, which the command line never
makes, every batch loses its remainder) and a batch smaller than that goes, so every
replica holds as many examples and the step is the one-device step on the examples kept. Evaluation
data is left whole (its figures are already exact); one replica keeps every batch.

Mixed precision (``--precision``): the model is built and trained under the dtype policy as
under one device. Under ``mixed_float16`` Keras' ``LossScaleOptimizer`` decided from the
first replica's gradients alone whether a step overflowed; :func:`install_keras_fixes`
makes every replica's verdict count (see :func:`_loss_scaled_apply_agreed_by_every_replica`).

Generated or in-memory data (``from_tensor_slices``, generators) cannot be sharded by
file, so :func:`distribute_dataset_options` sets the auto-shard policy to ``DATA``:
each worker takes its share of every global batch.
"""

import contextlib
import json
import numbers
import os

from applications import checks
from applications.errors import InputError, StrategyError

STRATEGIES = ("default", "mirrored", "multiworker", "tpu")

# One strategy of each kind per process: TensorFlow's collective ops key their
# instances per process, and several mirrored strategies created in one process collide.
_CACHE = {}


def set_intra_op_threads(threads):
    """Lets TensorFlow use ``threads`` threads inside one op (None: leave its default).

    TensorFlow's default splits every op over all cores. For the tiny matrix products
    of a recurrent step (a GRU step at batch 30 multiplies ``[30, 128]`` by
    ``[128, 384]``) the hand-off costs more than the work: on a 2-core CPU the CCCapsNet
    text classifier trains at 121 samples/s with the default and 183 with one thread
    (``benchmarks/text_classification.py throughput``), the two GRU directions still
    running side by side on the inter-op threads. Must be called before TensorFlow
    runs its first op; afterwards the setting can no longer change, and this warns
    and returns False instead of failing.

    Returns:
        True if the setting took effect (or nothing was asked), False otherwise.
    """
    if threads is None:
        return True
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 0:
        raise InputError(f"`threads` must be a non-negative integer (0: all cores). Received: threads={threads!r}")
    threads = int(threads)  # np.int64 was refused
    import tensorflow as tf

    if tf.config.threading.get_intra_op_parallelism_threads() == threads:
        return True
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError as err:  # the runtime is already initialised
        import warnings

        warnings.warn(
            f"could not set TensorFlow's intra-op threads to {threads}: {err}. Set it before "
            "TensorFlow runs its first op.",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    return True


def make_strategy(name="default", tpu=None):
    """The ``tf.distribute.Strategy`` called ``name`` (one of :data:`STRATEGIES`).

    Args:
        name: ``default``, ``mirrored``, ``multiworker`` or ``tpu``.
        tpu: the TPU name or address for ``name="tpu"`` (None: the TPU of this VM).

    Raises:
        StrategyError: an unknown name, a ``tpu`` with another strategy, no TPU
            reachable, ``multiworker`` without a cluster in ``TF_CONFIG`` or asked for
            after TensorFlow ran its first op.
    """
    if name not in STRATEGIES:
        raise StrategyError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}")
    if tpu is not None and name != "tpu":  # ignored, it trained on this machine instead
        raise StrategyError(f"--tpu is used only with --strategy tpu. Received: tpu={tpu!r}, strategy={name!r}")
    key = (name, tpu) if name == "tpu" else name
    if key not in _CACHE:
        _CACHE[key] = _create(name, tpu)
    return resolve_strategy(_CACHE[key])  # Keras' fixes, for several replicas or workers


def _create(name, tpu):
    import tensorflow as tf

    if name == "default":
        # Not tf.distribute.get_strategy(): inside another strategy's scope that returns the
        # scope's strategy, which was then cached and handed out as "default" ever after.
        try:  # TensorFlow's own default strategy; private, so a fallback if it moves
            from tensorflow.python.distribute import distribute_lib

            return distribute_lib._get_default_strategy()
        except (ImportError, AttributeError):
            return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = gpus or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    if name == "multiworker":
        # a malformed TF_CONFIG is one clear line, not a JSON or int() error
        if not tf_config().get("cluster"):
            # TensorFlow then makes a cluster of this process alone: each machine of the
            # intended cluster trained on its own, every one of them as the chief.
            raise StrategyError(
                "--strategy multiworker needs TF_CONFIG with the cluster and this task, e.g. "
                '{"cluster": {"worker": ["host1:port", "host2:port"]}, "task": {"type": "worker", "index": 0}}; '
                "for the devices of one machine use --strategy mirrored"
            )
        try:
            strategy = tf.distribute.MultiWorkerMirroredStrategy()
        except (ValueError, TypeError) as err:
            # TensorFlow's own check of TF_CONFIG (a task missing from the cluster, an
            # index past its addresses, addresses not in a list) was a traceback
            first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise StrategyError(
                f"TF_CONFIG's cluster and task do not fit together ({first_line}); give every process the "
                "same cluster (a list of addresses per task type) and its own task in it"
            ) from None
        except RuntimeError as err:
            if "startup" not in str(err):  # "Collective ops must be configured at program startup"
                raise
            raise StrategyError(
                f"the multiworker strategy must be created before TensorFlow runs its first op ({err}); "
                "call make_strategy('multiworker') first thing in the process"
            ) from None
        install_keras_fixes()  # else Keras' fit and evaluate fail under it
        return strategy
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    except Exception as err:  # the resolver raises ValueError, NotFoundError, ...
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise StrategyError(
            f"no TPU reachable ({first_line}); pass --tpu NAME, or use --strategy default|mirrored"
        ) from None


def resolve_strategy(strategy=None):
    """``strategy``, or the strategy of the current scope when None, ready for ``fit``.

    Every application's ``train`` and ``evaluate`` take a ``strategy`` argument, and a
    user may pass one made without :func:`make_strategy`: a multi-worker strategy, or
    any strategy of several replicas, then gets :func:`install_keras_fixes` here
    (without them Keras' ``fit`` failed under a multi-worker strategy in seven of the
    nine applications, and under a mirrored one whenever a dataset's first batch split
    unevenly over the replicas). The default strategy gets them too, for their build
    before the first trace.

    ``strategy`` may also be one of the names of :data:`STRATEGIES` (``"mirrored"``):
    the strategy :func:`make_strategy` gives for it, as ``--strategy`` of the command
    line (another string was an ``AttributeError`` deep in the application).

    Raises:
        InputError: a string that names no strategy of :data:`STRATEGIES`.
        StrategyError: a named strategy that cannot be created here (see :func:`make_strategy`).
    """
    import tensorflow as tf

    if isinstance(strategy, str):
        if strategy not in STRATEGIES:
            raise InputError(f"`strategy` must be a tf.distribute.Strategy, None or one of {STRATEGIES}. "
                             f"Received: strategy={strategy!r}")
        return make_strategy(strategy)  # (which resolves the strategy it made)
    strategy = strategy or tf.distribute.get_strategy()
    install_keras_fixes()  # every strategy: the build before the first trace (one device too)
    return strategy


def global_batch_size(per_replica_batch_size, strategy):
    """``per_replica_batch_size x strategy.num_replicas_in_sync`` (``strategy`` None: the
    strategy of the current scope; a name of :data:`STRATEGIES`: that strategy; see
    :func:`resolve_strategy`)."""
    # int() silently truncated 8.5 to 8, and 0 or -2 failed later inside tf.data.
    if isinstance(per_replica_batch_size, bool) or not isinstance(per_replica_batch_size, numbers.Integral) \
            or per_replica_batch_size < 1:
        raise InputError(
            "`per_replica_batch_size` must be a positive integer. "
            f"Received: per_replica_batch_size={per_replica_batch_size!r}"
        )
    if strategy is None or isinstance(strategy, str):
        strategy = resolve_strategy(strategy)
    return int(per_replica_batch_size) * int(strategy.num_replicas_in_sync)


def even_batch_count(examples, batch_size, replicas=1):
    """How many batches :func:`even_batches` leaves of ``examples`` examples batched by
    ``batch_size`` (the last batch partial), for ``replicas`` replicas in sync: the
    ``steps_per_epoch`` (or learning-rate schedule) of such a training dataset.

    Raises:
        InputError: a ``batch_size`` smaller than ``replicas`` (no batch would be left).
    """
    examples = checks.integer_at_least("examples", examples, 0)
    batch_size = checks.integer_at_least("batch_size", batch_size, 1)
    replicas = check_replicas(replicas, batch_size)
    full, rest = divmod(examples, batch_size)
    return full + (rest >= replicas if replicas > 1 else rest > 0)


def even_batches(dataset, replicas=1, batches=None):
    """The training batches of ``dataset`` cut for ``replicas`` replicas in sync: every
    replica holds as many examples (see the module doc, "Uneven batches").

    Each batch is cut to its first ``k x replicas`` examples, ``k`` as large as it can
    be, and a batch of fewer than ``replicas`` examples is left out. A batch is a tensor
    or a tuple, list or dict of them (ragged and sparse tensors too), all of the same
    number of rows; scalars are kept as they are. With one replica, or batches of a
    static size that the replicas divide (``drop_remainder=True``), ``dataset`` itself
    is returned.

    When batches may be left out, tf.data no longer knows how many an epoch has:
    ``batches`` (see :func:`even_batch_count`) is then asserted, so that Keras plans the
    epochs (an endless ``dataset`` stays endless). Without it, count them once
    (``text_classification.data.with_cardinality``): ``fit`` otherwise warns that the
    input ran out of data at the end of the first epoch.

    Raises:
        InputError: batches of a static size smaller than ``replicas``.
    """
    import tensorflow as tf

    replicas = check_replicas(replicas)
    if replicas == 1:
        return dataset
    spec = dataset.element_spec
    static = _rows_of(spec)
    if static is not None:
        check_replicas(replicas, static)  # batches too small for every replica: refused
        if static % replicas == 0:
            return dataset
    unpack = type(spec) is tuple  # tf.data calls the functions with a tuple's components

    def whole(element):
        return element if unpack else element[0]

    def cut(*element):
        element = whole(element)
        keep = _rows_of(element) // replicas * replicas
        return tf.nest.map_structure(lambda value: _first_rows(value, keep), element)

    if static is not None:  # no batch too small: the count stays known
        return dataset.map(cut)
    even = dataset.filter(lambda *element: _rows_of(whole(element)) >= replicas).map(cut)
    # (static: a Python comparison of the count failed in traced code, e.g. an epoch_stream pass)
    if batches is None and tf.get_static_value(dataset.cardinality()) == tf.data.INFINITE_CARDINALITY:
        batches = tf.data.INFINITE_CARDINALITY
    if batches is None:
        return even
    return even.apply(tf.data.experimental.assert_cardinality(batches))


def check_replicas(replicas, batch_size=None):
    """``replicas`` (an integer >= 1), checked to leave every replica at least one
    example of a global batch of ``batch_size`` (when given).

    Raises:
        InputError: a ``batch_size`` smaller than ``replicas``, or a bad ``replicas``.
    """
    replicas = checks.integer_at_least("replicas", replicas, 1)
    if batch_size is not None and batch_size < replicas:
        raise InputError(f"a batch of {batch_size} cannot be split over {replicas} replicas: give every replica "
                         "at least one example (a larger batch size). "
                         f"Received: batch_size={batch_size!r}, replicas={replicas!r}")
    return replicas


def _rows_of(batch):
    """The rows of a batch (or of a batch's spec: None when not static): those of its first
    tensor of rank 1 or more."""
    import tensorflow as tf

    for value in tf.nest.flatten(batch):
        shape = getattr(value, "shape", None)
        if shape is None or shape.rank == 0:
            continue
        if isinstance(value, tf.TypeSpec):
            return shape[0]
        if isinstance(value, tf.RaggedTensor):
            return value.nrows()
        if isinstance(value, tf.SparseTensor):
            return value.dense_shape[0]
        return tf.shape(value)[0]
    raise InputError(f"a training batch must hold a tensor with a batch dimension. Received: {batch!r:.200}")


def _first_rows(value, rows):
    import tensorflow as tf

    if value is None or value.shape.rank == 0:
        return value
    if isinstance(value, tf.SparseTensor):
        return tf.sparse.slice(value, tf.zeros_like(value.dense_shape),
                               tf.concat([[tf.cast(rows, tf.int64)], value.dense_shape[1:]], 0))
    return value[:rows]


#: batches that :func:`prefetched` prepares ahead of the step that takes them
PREFETCH_BATCHES = 2


def pipeline_options():
    """``tf.data.Options`` of the applications' pipelines: tf.data's autotuner off.

    With the autotuner on, a training step on a CPU that is shared (a process pinned
    to one core, or more training processes than cores, as the benchmarks run their
    variants side by side) waited at random, idle, for the next batch: Occluded
    Moving MNIST's ``fit`` took 103 ms per update for 58-72 ms of CPU on one pinned
    core, and of three runs side by side on two cores one took 205 ms per update
    and the others 101-106 ms, with the same 72 ms of CPU each (2026-11-29; the
    update times stick to multiples of about 100 ms). With it off, wall time equals
    CPU time on one core and the three runs side by side share both cores evenly.
    The text classifier's two GRU directions had whole epochs at half speed at
    random the same way (``benchmarks/text_classification.py throughput``: 146.7
    samples/s in about half of the timed runs, 225-250 in the others; 213-246 in all
    with it off). Map parallelism and prefetching still work, with TensorFlow's
    static defaults.
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def prefetched(dataset, buffer_size=PREFETCH_BATCHES):
    """``dataset.prefetch(buffer_size)`` with :func:`pipeline_options` (no autotuner).

    The last step of every application's pipeline: the next batches are prepared
    while the model trains on the current one, without the autotuner's waits.
    """
    return dataset.prefetch(buffer_size).with_options(pipeline_options())


def epoch_seed(seed, epoch):
    """The ``int64`` seed of epoch ``epoch`` of a run seeded ``seed`` (a scalar tensor).

    A stateless function of the pair: the same pair gives the same seed in any
    process, so a resumed run draws (shuffles, crops, mixes) its epochs as the
    uninterrupted run did; two epochs or two seeds give unrelated seeds. ``epoch`` may
    be a tensor (the element of :func:`epoch_stream`'s counter). An integer ``seed`` of
    2**63 or more (the seed is an ``int64``) is folded into 64 bits first, its 64-bit
    words xor-ed together, and read as an ``int64`` (as a graph casts a ``uint64``):
    eagerly, TensorFlow refused such a seed.
    """
    import tensorflow as tf

    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool) and seed >= 2**63:
        seed, folded = int(seed), 0
        while seed:
            seed, folded = seed >> 64, folded ^ (seed & (2**64 - 1))
        seed = folded - 2**64 if folded >= 2**63 else folded  # int64's bits of a uint64
    pair = tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])
    return tf.random.stateless_uniform([], pair, minval=None, maxval=None, dtype=tf.int64)


def epoch_stream(one_pass, batches, first_epoch=0):
    """An endless training stream: the epochs ``first_epoch``, ``first_epoch + 1``, ...
    one after the other, epoch ``e`` being the dataset ``one_pass(e)``. Train on it with
    ``fit(stream, steps_per_epoch=batches)``.

    Why: a dataset reshuffled by ``tf.data`` every iteration (``shuffle(...,
    reshuffle_each_iteration=True)``, ``Dataset.random(..., rerandomize_each_iteration=
    True)``) advances its seeds every time an iterator is *created*, and Keras' ``fit``
    creates two per epoch (3.15: one at the end of an epoch, dropped at the start of the
    next), while a resumed process starts counting again from 0. So a run resumed at
    epoch ``k`` saw the orders and draws of epochs 0, 1, ... again. Here ``one_pass``
    gets the epoch's number (an ``int64`` scalar tensor) and seeds every draw of it
    with :func:`epoch_seed` (``shuffle(n, seed=epoch_seed(seed, e))``), and ``fit`` keeps
    one iterator across the epochs (Keras does when ``steps_per_epoch`` is given):
    epoch ``e`` is the same in an uninterrupted run and in one resumed at
    ``first_epoch=e`` (:func:`applications.fault_tolerance.resume_epoch`), whatever
    Keras does with iterators.

    Args:
        one_pass: ``epoch -> tf.data.Dataset`` of the epoch's batches.
        batches: the batches of every epoch (``steps_per_epoch``; see
            :func:`even_batch_count`). Each epoch's count is asserted while it is read:
            a pass of another length would shift every later epoch's start, and an
            empty one would make the stream spin forever.
        first_epoch: the epoch the stream starts at (a resumed run's).

    Returns:
        An endless ``tf.data.Dataset`` (cardinality ``INFINITE``); batch and prefetch
        inside ``one_pass`` or after (:func:`prefetched`).
    """
    import tensorflow as tf

    batches = checks.integer_at_least("batches", batches, 1)
    first_epoch = checks.integer_at_least("first_epoch", first_epoch, 0)
    if not callable(one_pass):
        raise InputError(f"`one_pass` must be a function epoch -> tf.data.Dataset. Received: one_pass={one_pass!r}")

    def checked_pass(epoch):
        # The epoch's draws are seeded by the seeds given (epoch_seed) alone: without a
        # graph seed here, tf.data's ops take (a default, the op's seed) whatever global
        # seed the process set (keras.utils.set_random_seed(0) even made tf.data compare
        # a seed tensor with 0 in Python, an error). It holds for this function only.
        tf.compat.v1.set_random_seed(None)
        epoch_pass = one_pass(epoch)
        if not isinstance(epoch_pass, tf.data.Dataset):  # refused below, outside tf.data's trace
            returned.append(type(epoch_pass).__name__)
            return tf.data.Dataset.range(0)
        return epoch_pass.apply(tf.data.experimental.assert_cardinality(batches))

    returned = []
    stream = tf.data.Dataset.counter(first_epoch).flat_map(checked_pass)  # traces checked_pass
    if returned:
        raise InputError(f"`one_pass` must return the epoch's tf.data.Dataset. Received: {returned[0]}")
    return stream.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))


def training_epochs(one_pass, seed, batches, first_epoch=None):
    """A training pipeline drawn from ``seed``, as one epoch or as an :func:`epoch_stream`.

    ``one_pass(pass_seed, redraw)`` builds an epoch's batches with every draw (shuffle,
    ``Dataset.random``) seeded by ``pass_seed`` and ``reshuffle_each_iteration`` /
    ``rerandomize_each_iteration`` set to ``redraw``.

    * ``first_epoch=None``: ``one_pass(seed, True)``, one epoch that ``tf.data`` draws
      anew each time it is iterated (for callers that iterate it themselves; a resumed
      process would draw the first epochs' orders again).
    * ``first_epoch=k``: the endless stream of the epochs ``k, k + 1, ...``, epoch ``e``
      being ``one_pass(epoch_seed(seed, e), False)``; ``fit(..., steps_per_epoch=batches)``.

    ``seed`` is checked here, when the pipeline is made (:func:`checks.stream_seed`: an
    integer >= 0, or None without ``first_epoch``): tf.data failed on a bad one with a raw
    TensorFlow error, with ``first_epoch`` only when the stream was read.
    """
    seed = checks.stream_seed(seed, first_epoch)
    if first_epoch is None:
        return one_pass(seed, True)
    return epoch_stream(lambda epoch: one_pass(epoch_seed(seed, epoch), False), batches, first_epoch)


def distribute_dataset_options(dataset):
    """``dataset`` with auto-sharding by ``DATA`` (right for in-memory or generated data)."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def tf_config():
    """The ``TF_CONFIG`` environment variable as a dict (``{}`` when unset or empty).

    Raises:
        StrategyError: ``TF_CONFIG`` is not a JSON object, or its ``cluster`` / ``task``
            entries are malformed (``task.index`` not an integer, ...).
    """
    text = os.environ.get("TF_CONFIG") or ""
    if not text.strip():
        return {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        raise StrategyError(f"TF_CONFIG is not valid JSON ({err}): {text[:80]!r}") from None
    if not isinstance(config, dict):
        raise StrategyError(f"TF_CONFIG must be a JSON object with 'cluster' and 'task'. Received: {text[:80]!r}")
    cluster, spec = config.get("cluster") or {}, config.get("task") or {}
    if not isinstance(cluster, dict):
        raise StrategyError(f"TF_CONFIG 'cluster' must map task types to address lists. Received: {cluster!r}")
    if not isinstance(spec, dict):
        raise StrategyError(f"TF_CONFIG 'task' must be like {{\"type\": \"worker\", \"index\": 0}}. "
                            f"Received: {spec!r}")
    index = spec.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, (int, str)) or not str(index).strip().isdigit():
        raise StrategyError(f"TF_CONFIG task index must be a non-negative integer. Received: {index!r}")
    if cluster and not isinstance(spec.get("type"), str):
        # Without a type every process took itself for the chief and wrote into --run-dir.
        raise StrategyError(f"TF_CONFIG 'task' must name this process's type (\"chief\", \"worker\", ...). "
                            f"Received: {spec!r}")
    return config


def task():
    """``(task_type, task_index)`` of this process from ``TF_CONFIG`` (``("chief", 0)`` if none)."""
    spec = tf_config().get("task") or {}
    task_type = spec.get("type")
    index = int(spec.get("index", 0))
    if task_type is None:
        return "chief", 0
    return task_type, index


def is_chief(strategy=None):
    """True for the process that writes the outputs (the only process without TF_CONFIG).

    In a multi-worker cluster the chief is task ``chief`` or, with no chief task,
    ``worker 0``. Under a strategy that is not multi-worker, ``TF_CONFIG`` is not read.
    """
    if strategy is not None and not _is_multi_worker(strategy):
        return True
    task_type, index = task()
    if task_type == "chief":
        return True
    has_chief = "chief" in (tf_config().get("cluster") or {})
    return task_type == "worker" and index == 0 and not has_chief


def _is_multi_worker(strategy):
    extended = getattr(strategy, "extended", None)
    return bool(getattr(extended, "_in_multi_worker_mode", lambda: False)())


def output_dir(run_dir, strategy=None):
    """Where this process writes: ``run_dir`` for the chief, a sub-folder for other workers.

    Workers of a multi-worker cluster run the same command (same ``--run-dir``, often on
    a shared file system); they write their copies of the outputs apart so that they do
    not clobber the chief's.
    """
    if is_chief(strategy):
        return run_dir
    task_type, index = task()
    return os.path.join(run_dir, "workers", f"{task_type}-{index}")


def install_keras_fixes():
    """Works around Keras 3 (3.15) bugs of ``fit``/``evaluate`` under a strategy of
    several replicas or workers, and a double trace without one, for every model of
    the process.

    Called once a strategy is resolved (:func:`make_strategy` and
    :func:`resolve_strategy` do), so that every ``fit`` and ``evaluate`` under it works
    whoever calls them: each application's ``train`` and ``evaluate``, the ``evaluate``
    inside ``train``, the tuner's trials, and a user's own model (before, each call site
    had to call a helper first, and seven of the nine applications did not: ``train sst
    --strategy multiworker`` failed at ``fit``).

    * ``fit`` and ``evaluate`` first build the model, loss, metrics and optimizer from a
      batch that they average eagerly over the replicas (``strategy.reduce("MEAN",
      batch)``). Under ``MultiWorkerMirroredStrategy`` that all-reduce fails ("Attempt to
      convert a value (PerReplica...) ... to a Tensor", tensorflow/tensorflow#72388);
      under ``MirroredStrategy`` it fails whenever the dataset's first batch splits
      unevenly over the replicas ("Inputs to operation AddN of type AddN must have the
      same size and shape", keras-team/keras#19246): a validation set smaller than one
      global batch with a size the replicas do not divide, such as 19 examples on two
      replicas. Here they are built from the dataset's element spec instead, under
      every strategy of several replicas or workers: no batch is read, no collective runs.
    * under many workers, the logs of every step are reduced with
      ``strategy.reduce("MEAN", v, axis=0)``, which fails on scalars ("Invalid
      reduction dimension 0"). Here a scalar is reduced to its mean over the replicas
      (``axis=None``).
    * ``fit`` with ``compile(steps_per_execution=n)``, ``n > 1``, runs the steps inside a
      ``tf.while_loop`` and ``tf.cond``, where the gradients' collective all-reduce of a
      mirrored or multi-worker strategy gets its instance key from a placeholder that
      nothing feeds ("You must feed a value for placeholder tensor ... with dtype
      int32" at the first step). Such a ``fit`` is refused at once with a ``ValueError``
      naming the ways out (``evaluate`` and ``predict``, which all-reduce nothing, run).

    * without a strategy (the default one), Keras builds the model's loss, metrics and
      optimizer inside the first trace of the train (or test) function, and TensorFlow
      traces a ``tf.function`` whose first call creates variables twice: the train step,
      gradients and all, was traced twice in every ``fit``. Here they are built
      beforehand from the dataset's element spec, as Keras does under a strategy, and
      the step is traced once (a tiny occluded_mnist ``train``: 15 s down to 10 s).
      When that build fails, Keras' deferred build takes over as before.
    * a functional model that is built already (just made, or loaded) gets its compiled
      metrics, loss and optimizer built from its outputs' specs, under every strategy
      that builds from the element spec: Keras ran the whole model once more on the
      data's specs only to learn the predictions' rank and last axis (a quarter of a
      tiny text classifier's ``evaluate``; see :func:`_build_compiled_from_outputs`).
    * under ``mixed_float16`` (a ``LossScaleOptimizer``) with several replicas, a step is
      applied, or skipped with the loss scale halved, as the gradients of every replica
      say: Keras looked at the first replica's alone, so a float16 overflow on another
      one turned every weight NaN under a mirrored strategy and deadlocked a multi-worker
      cluster (see :func:`_loss_scaled_apply_agreed_by_every_replica`).

    The results are those of Keras' own functions (tested for the default and a
    mirrored strategy); the second patched function behaves as before under every
    strategy but the multi-worker one. Idempotent; returns True once
    the fixes are in place, False (with a warning) when this Keras has not the
    functions they patch.
    """
    global _FIXES_INSTALLED
    if _FIXES_INSTALLED:
        return True
    try:
        from keras.src.backend.tensorflow import trainer as tf_trainer

        # Keras' own functions, kept from the first install (a second one, after a test
        # reset the flag, must not wrap the patched functions)
        build = _KERAS_ORIGINALS.setdefault("build", tf_trainer.TensorFlowTrainer._maybe_symbolic_build)
        reduce_per_replica = _KERAS_ORIGINALS.setdefault("reduce_per_replica", tf_trainer.reduce_per_replica)
        make_train_function = _KERAS_ORIGINALS.setdefault("make_train_function",
                                                          tf_trainer.TensorFlowTrainer.make_train_function)
        multi_worker = tf_trainer._collective_all_reduce_multi_worker
    except (ImportError, AttributeError) as err:  # Keras' internals moved: nothing to patch
        import warnings

        warnings.warn(f"Keras' distribution fixes not installed ({err}): fit under "
                      "--strategy multiworker (or mirrored, on a first batch that splits unevenly "
                      "over the replicas) may fail", RuntimeWarning, stacklevel=2)
        return False
    import keras
    import tensorflow as tf

    def several_replicas(strategy):
        return strategy is not None and (multi_worker(strategy) or strategy.num_replicas_in_sync > 1)

    def element_spec(iterator):
        try:
            return iterator.data_adapter.get_tf_dataset().element_spec
        except (AttributeError, TypeError, ValueError):  # data Keras reads otherwise
            return None

    def maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        spec = data_batch
        if spec is None and iterator is not None and (strategy is None or several_replicas(strategy)):
            spec = element_spec(iterator)  # (one replica of a strategy: Keras reads a batch, as before)
        if spec is not None:
            # a built functional model (just made, or loaded): its compiled metrics and
            # loss are built from its outputs' specs, without tracing the model once more
            try:
                with strategy.scope() if strategy is not None else contextlib.nullcontext():
                    if _build_compiled_from_outputs(self, spec):
                        return None  # nothing left for Keras to build
            except Exception:  # noqa: BLE001 -- Keras' build then builds what is left
                pass
        if strategy is None:
            # Keras leaves the build to the first trace of the train (or test) function;
            # TensorFlow traces a function that creates variables on its first call twice
            if spec is not None:
                try:
                    self._symbolic_build(data_batch=spec)
                except Exception:  # noqa: BLE001 -- Keras' way then: the trace builds what is left
                    pass
            return build(self, iterator=iterator, data_batch=spec)
        if data_batch is None and spec is not None and several_replicas(strategy):
            # the spec's shapes and dtypes are all that the symbolic build reads
            return build(self, data_batch=spec)
        return build(self, iterator=iterator, data_batch=data_batch)

    def reduce_scalars_per_replica(values, strategy, reduction):
        if reduction not in ("auto", "mean") or not multi_worker(strategy):
            return reduce_per_replica(values, strategy, reduction)

        def reduce(value):
            if strategy.experimental_local_results(value)[0].shape.rank == 0:
                return strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None)
            return reduce_per_replica(value, strategy, reduction)

        return keras.tree.map_structure(reduce, values)

    def collective_all_reduce(model):
        strategy = model._distribute_strategy
        if not several_replicas(strategy) or isinstance(strategy, tf.distribute.TPUStrategy):
            return False
        cross_device_ops = getattr(strategy.extended, "_cross_device_ops", None)
        return model.jit_compile or not isinstance(cross_device_ops, tf.distribute.ReductionToOneDevice)

    def make_train_function_of_one_step_per_execution(self, force=False):
        if self.steps_per_execution > 1 and collective_all_reduce(self):
            strategy = self._distribute_strategy
            raise InputError(
                f"steps_per_execution={self.steps_per_execution} cannot train under a "
                f"{type(strategy).__name__} of {strategy.num_replicas_in_sync} replicas (Keras 3.15 runs "
                "the steps in a loop that feeds TensorFlow's collective all-reduce no instance key); "
                "compile with steps_per_execution=1, train under --strategy default or tpu, or make a "
                "MirroredStrategy(cross_device_ops=tf.distribute.ReductionToOneDevice()) without jit_compile"
            )
        return make_train_function(self, force=force)

    tf_trainer.TensorFlowTrainer._maybe_symbolic_build = maybe_symbolic_build
    tf_trainer.TensorFlowTrainer.make_train_function = make_train_function_of_one_step_per_execution
    tf_trainer.reduce_per_replica = reduce_scalars_per_replica
    _install_loss_scale_fix()
    _FIXES_INSTALLED = True
    return True


def _install_loss_scale_fix():
    """Replaces ``LossScaleOptimizer._tf_apply`` by
    :func:`_loss_scaled_apply_agreed_by_every_replica` (Keras' own kept in
    ``_KERAS_ORIGINALS``, so that a second install does not wrap the replacement); when
    this Keras has not the methods it uses, warns and leaves Keras' own."""
    try:
        from keras.src.optimizers.loss_scale_optimizer import LossScaleOptimizer

        keras_apply = _KERAS_ORIGINALS.setdefault("loss_scaled_apply", LossScaleOptimizer._tf_apply)
        for name in ("check_finite", "_stateful_handle_finite_grads", "_stateful_handle_non_finite_grads"):
            getattr(LossScaleOptimizer, name)  # (what the replacement calls)
    except (ImportError, AttributeError) as err:
        import warnings

        warnings.warn(f"Keras' loss-scale fix not installed ({err}): under --precision mixed_float16 with "
                      "several replicas, a float16 overflow on one replica alone may make the weights NaN",
                      RuntimeWarning, stacklevel=3)
        return
    LossScaleOptimizer._tf_apply = _loss_scaled_apply_agreed_by_every_replica(keras_apply)


def _loss_scaled_apply_agreed_by_every_replica(keras_apply):
    """``LossScaleOptimizer._tf_apply`` (Keras 3.15) whose step is applied, or skipped
    with the loss scale halved, as every replica's gradients say, not the first's.

    Keras hands the optimizer each replica's own gradients, before their all-reduce
    (which the inner optimizer makes as it applies them). Under a strategy that uses
    ``merge_call`` (a ``MirroredStrategy`` or ``MultiWorkerMirroredStrategy`` on CPUs,
    or on GPUs without XLA), ``LossScaleOptimizer`` checks that they are finite on
    every replica but takes the first replica's answer ("each replica computed the
    same value, since grads is all-reduced", which they are not yet). A step whose
    float16 gradients overflowed on another replica only was then applied: the
    infinite gradient went into the all-reduce and every weight turned NaN, and the
    loss scale was not halved (under one device, the same batch skips the step and
    halves the scale). Here the replicas' verdicts are summed over every replica (of
    every worker), so all apply or all skip, as one device does on the whole batch.

    Under a multi-worker strategy, where each worker runs the cond of its own, Keras'
    check deadlocked the cluster instead: a worker whose gradients were finite waited
    in the all-reduce for one that had skipped the step.

    Other cases go to ``keras_apply`` unchanged: no ``merge_call`` (XLA on GPUs, or no
    strategy at all), a ``TPUStrategy`` (untested here), a call in cross-replica context.
    """
    import tensorflow as tf
    from keras import ops

    def apply(self, grads, trainable_variables=None):
        if (tf.distribute.in_cross_replica_context() or tf.__internal__.distribute.strategy_supports_no_merge_call()
                or isinstance(tf.distribute.get_strategy(), tf.distribute.TPUStrategy)):
            return keras_apply(self, grads, trainable_variables)

        def non_finite(grads):
            return tf.cast(tf.logical_not(self.check_finite(grads)), tf.float32)

        def in_cross_replica_context(distribution, grads, trainable_variables):
            flags = distribution.extended.call_for_each_replica(non_finite, args=(grads,))
            finite = tf.equal(distribution.reduce(tf.distribute.ReduceOp.SUM, flags, axis=None), 0.0)

            def apply_finite():
                distribution.extended.call_for_each_replica(
                    self._stateful_handle_finite_grads, args=(grads, trainable_variables))

            # (a cond in cross-replica context: its branch's all-reduce calls merge_call, as Keras has it)
            ops.cond(finite, apply_finite, self._stateful_handle_non_finite_grads)

        tf.distribute.get_replica_context().merge_call(in_cross_replica_context, args=(grads, trainable_variables))

    return apply


def _build_compiled_from_outputs(model, data_batch):
    """Builds ``model``'s compiled metrics, loss and optimizer as Keras'
    ``Trainer._symbolic_build`` (3.15) does, but without running the model.

    Keras gets the predictions' spec by tracing the whole model on ``data_batch``'s
    specs (``backend.compute_output_spec(model, x)``), then builds the compiled metrics
    and loss from it. A functional model that is built already (one just made or
    loaded: its layers are built, its compiled metrics and loss are not) has that spec
    in its outputs: rank, last axis and structure, all that ``CompileMetrics`` and
    ``CompileLoss`` read. That trace was a quarter of a tiny text classifier's
    ``evaluate`` (3-5 s of 13-20 s: its bidirectional GRU traced once more) and the
    same in every ``fit`` of a new model.

    Applies only when nothing else is left to build: ``model`` a ``keras.Model`` of
    inputs and outputs whose ``call`` is the functional one, every layer built, the
    compiled metrics or loss not built, every output's last axis known, and
    ``data_batch``'s inputs accepted by the model's input specs. Returns True once
    they are built, False (nothing done) otherwise: Keras' own build then runs.
    """
    try:
        from keras.src import backend, tree
        from keras.src.layers import input_spec
        from keras.src.models.functional import Functional, unpack_singleton
        from keras.src.trainers.data_adapters import data_adapter_utils
    except ImportError:  # Keras' internals moved: its own build
        return False
    if not isinstance(model, Functional) or type(model).call is not Functional.call:
        return False  # a subclass's call may return other than its outputs
    metrics_unbuilt = model._compile_metrics is not None and not model._compile_metrics.built
    loss_unbuilt = model._compile_loss is not None and not model._compile_loss.built
    if not (metrics_unbuilt or loss_unbuilt):
        return False  # Keras' build: the optimizer at most, the model is not run
    if not all(layer.built for layer in model._flatten_layers()):
        return False
    outputs = tree.flatten(model._outputs_struct)
    if not all(isinstance(t, backend.KerasTensor) and t.shape and t.shape[-1] is not None for t in outputs):
        return False  # (accuracy's kind is chosen by the last axis)

    def symbolic(value):
        return None if value is None else backend.KerasTensor(value.shape, backend.standardize_dtype(value.dtype))

    try:
        x, y, sample_weight = data_adapter_utils.unpack_x_y_sample_weight(tree.map_structure(symbolic, data_batch))
        input_spec.assert_input_compatibility(model.input_spec, x, model.name)
    except (ValueError, TypeError):  # inputs the model may refuse: Keras' build says how
        return False
    # what Functional.call returns, as specs without history (as compute_output_spec gives)
    y_pred = unpack_singleton(tree.pack_sequence_as(model._outputs_struct, [
        backend.KerasTensor(t.shape, t.dtype, sparse=t.sparse, ragged=t.ragged) for t in outputs]))
    if metrics_unbuilt:
        backend.compute_output_spec(model.compute_metrics, x, y, y_pred, sample_weight=sample_weight)
    if loss_unbuilt:
        backend.compute_output_spec(model._compute_loss, x, y, y_pred, sample_weight=sample_weight, training=False)
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    model._post_build()
    return True


_FIXES_INSTALLED = False
_KERAS_ORIGINALS = {}
#: the name of :func:`install_keras_fixes` before it also fixed mirrored strategies
install_multi_worker_fixes = install_keras_fixes
