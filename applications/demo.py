"""The default demo: a two-layer EM-routing capsule network on handwritten digits.

Needs no download: the 1,797 8x8 digits that scikit-learn ships (``load_digits``) are
the default data. The same builder runs on 28x28 MNIST (see
``benchmarks/em_routing_mnist.py``).

    keras-capsules train                 # this demo, a minute or two on a laptop CPU
    python -m applications train demo --epochs 5 --run-dir runs/demo
    keras-capsules train demo --strategy mirrored --batch-size 16   # 16 per replica
    keras-capsules train demo --data-dir ../shared/data/mnist       # 28x28 MNIST (IDX files)
    keras-capsules tune demo --tuner bayesian --directory runs/tune --max-trials 10

Running the same ``train`` command again after a crash resumes from the last epoch
saved in ``<run-dir>/backup`` (see ``applications.fault_tolerance``).

The model: a small convolutional stem, a 1x1 convolution that turns every location
into ``primary_capsules`` capsules (one score and one 4x4 pose each), ``EMRouting``
from this variable number of input capsules to ``hidden_capsules`` capsules of 4x4,
their scores batch-normalized (without it training stalled in about half the runs; see
:func:`build_model`'s ``hidden_norm``), and ``EMRouting`` from those to one capsule per
class. The class scores are the final routing scores (logits).
"""

import argparse
import collections.abc
import inspect
import numbers
import os
import sys

import keras
import numpy as np

from applications import arguments, checks, console, distribute, fault_tolerance, plotting
from applications.mnist_digits import arrays_fingerprint
# the demo's data loads no TensorFlow (benchmarks/demo_seeds.py reads it first): re-exported here
from applications.mnist_digits import load_arrays, load_digits_arrays  # noqa: F401
from applications.errors import InputError, PathNotFoundError, create_run_dir, leaves_no_empty_run_dir
from keras_capsules.layers import EMRouting

NUM_CLASSES = 10


def build_model(
    input_shape=(8, 8, 1),
    num_classes=NUM_CLASSES,
    filters=32,
    primary_capsules=8,
    hidden_capsules=16,
    pose_size=4,
    n_iters=2,
    hidden_norm=True,
    synchronized_batchnorm=False,
    name="em_capsules",
):
    """Builds the demo capsule network.

    Args:
        input_shape: ``(height, width, channels)``; height and width may be None.
        num_classes: number of output capsules (classes), at least 2.
        filters: channels of the convolutional stem.
        primary_capsules: capsules per location of the last feature map.
        hidden_capsules: output capsules of the first routing layer.
        pose_size: poses are ``pose_size x pose_size`` matrices.
        n_iters: EM iterations of both routing layers. The demo uses 2: in this small
            network, 3 iterations (the paper's default) make the assignments
            saturate early and learning takes several times more epochs. With 1
            iteration the class scores do not depend on the votes (the routing
            kernels get no gradient): use 2 or more.
        hidden_norm: batch-normalize the hidden capsules' scores before the second
            routing (momentum 0.9). Each of those scores sums over every input capsule
            (128 on the 8x8 digits), so they grow large as the routing's betas do; without
            the normalization, after two epochs almost every hidden capsule's activation
            (the sigmoid of its score) is pinned at 0 or 1 whatever the digit, and in about
            half the runs some class capsules stop depending on the input, which stalls
            training at 70-85% accuracy. (On validation digits, seeds 0-9, 25 epochs,
            ``benchmarks/demo_seeds.py``, 2026-12-01: 0.913-0.986 accuracy with it,
            mean 0.962, none below 0.9; 0.750-0.969 without it, mean 0.889, six runs
            below 0.9. A run's validation accuracy on these 144 digits can swing in the
            last epochs while its training accuracy stays above 0.97: seed 4 of an
            earlier version read 0.962 at epoch 20 and 0.635 at 23.) False builds the
            earlier model, without the ``norm_hidden`` layer.
        synchronized_batchnorm: batch statistics over the global batch of all
            replicas (``train`` sets it when there are several replicas, so that
            every replica keeps identical moving statistics). True or False.
        name: model name.

    Returns:
        A ``keras.Model`` from images to class logits ``[batch, num_classes]``.
    """
    # (pose_size=0 failed in an error about `filters`, 2.0 with a raw shape error;
    # hidden_norm="no" and synchronized_batchnorm="no" were true)
    p = pose_size = checks.integer_at_least("pose_size", pose_size, 1)
    # (num_classes=1 built a one-capsule model whose softmax is always 1: nothing to learn)
    num_classes = checks.integer_at_least("num_classes", num_classes, 2)
    filters = checks.integer_at_least("filters", filters, 1)
    primary_capsules = checks.integer_at_least("primary_capsules", primary_capsules, 1)
    hidden_norm = checks.true_or_false("hidden_norm", hidden_norm)
    synchronized_batchnorm = checks.true_or_false("synchronized_batchnorm", synchronized_batchnorm)
    images = keras.Input(input_shape, name="images")
    x = images
    # As in Heinsen's smallNORB model: normalization before each convolution, Swish after.
    for k, stride in enumerate((1, 2)):
        x = keras.layers.BatchNormalization(synchronized=synchronized_batchnorm, name=f"norm{k}")(x)
        x = keras.layers.Conv2D(
            filters, 3, strides=stride, padding="same", kernel_initializer="he_normal", name=f"conv{k}"
        )(x)
        x = keras.layers.Activation("swish", name=f"swish{k}")(x)
    scores = keras.layers.BatchNormalization(synchronized=synchronized_batchnorm, name="norm_scores")(x)
    scores = keras.layers.Conv2D(primary_capsules, 1, name="primary_scores")(scores)
    poses = keras.layers.BatchNormalization(synchronized=synchronized_batchnorm, name="norm_poses")(x)
    poses = keras.layers.Conv2D(primary_capsules * p * p, 1, name="primary_poses")(poses)
    scores = keras.layers.Reshape((-1,), name="capsule_scores")(scores)
    poses = keras.layers.Reshape((-1, p, p), name="capsule_poses")(poses)
    a, mu, _ = EMRouting(hidden_capsules, p, n_iters=n_iters, name="routing1")([scores, poses])
    if hidden_norm:
        # momentum 0.9, not 0.99: the scores' scale moves fast while the betas grow, and
        # statistics that lagged behind it cost 3-16 points of validation accuracy
        a = keras.layers.BatchNormalization(momentum=0.9, synchronized=synchronized_batchnorm, name="norm_hidden")(a)
    # (float32 under a mixed policy: the logits the loss and metrics read)
    logits, _, _ = EMRouting(num_classes, p, n_iters=n_iters, n_inp=hidden_capsules, name="routing2",
                             dtype=arguments.output_dtype())([a, mu])
    return keras.Model(images, logits, name=name)


TEST_FRACTION = 0.2


def split_indices(num_examples, test_fraction=TEST_FRACTION, seed=0, hold_out=False):
    """The ``(train, test)`` indices of :func:`make_datasets`' split (``test``: the
    validation indices with ``hold_out=True``).

    Raises:
        InputError (a ValueError): ``num_examples`` or ``seed`` is not an integer >= 0
            (a seed of -1 or 1.5 was numpy's traceback, ``True`` the split of 1),
            ``test_fraction`` not a number in (0, 1), or the examples are too few for
            both parts.
    """
    num_examples = checks.integer_at_least("num_examples", num_examples, 0)
    seed = checks.integer_at_least("seed", seed, 0)
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, numbers.Real) or not 0 < test_fraction < 1:
        # 0, 1 or 1.5 were reported as too few examples ("use a larger --limit")
        raise InputError(f"`test_fraction` must be a number in (0, 1). Received: test_fraction={test_fraction!r}")
    order = np.random.default_rng(seed).permutation(num_examples)
    n_test = int(round(num_examples * test_fraction))
    if n_test < 1 or n_test >= num_examples:
        # Keras fails later on an empty split with "not enough values to unpack".
        raise InputError(
            f"{num_examples} example(s) are too few for a train/test split (test_fraction="
            f"{test_fraction}): both parts need at least one; use more data (e.g. a larger --limit)"
        )
    test, train = order[:n_test], order[n_test:]
    if hold_out:
        n_valid = int(round(len(train) * test_fraction))
        if n_valid < 1 or n_valid >= len(train):
            raise InputError(
                f"{num_examples} example(s) are too few to hold validation examples out of the training "
                f"part (test_fraction={test_fraction}); use more data (e.g. a larger --limit)"
            )
        test, train = train[:n_valid], train[n_valid:]
    return train, test


def training_batches(num_examples, batch_size, test_fraction=TEST_FRACTION, seed=0, hold_out=False, replicas=1):
    """The batches of an epoch of :func:`make_datasets`' training pipeline."""
    train, _ = split_indices(num_examples, test_fraction, seed, hold_out)
    return distribute.even_batch_count(len(train), batch_size, replicas)


def make_datasets(images, labels, batch_size, test_fraction=TEST_FRACTION, seed=0, hold_out=False, replicas=1,
                  first_epoch=None):
    """Shuffled train/test ``tf.data`` pipelines from arrays (a fixed, seeded split).

    ``batch_size`` is the global batch (see ``applications.distribute``). The datasets
    shard by ``DATA`` under a multi-worker strategy; the training batches are cut for
    ``replicas`` replicas in sync (``distribute.even_batches``), the test batches not. With ``hold_out=True`` the second
    pipeline holds *validation* examples instead: ``test_fraction`` of the training
    part, held out of it (the first pipeline trains without them), and the test part
    is not used. Model selection (``tuning.demo``) validates on these, so that the
    test examples never take part in a choice.

    The training pipeline is reshuffled every epoch: with ``first_epoch=None``
    (default) it is one epoch, reshuffled by ``tf.data`` each time it is iterated; with
    ``first_epoch=k`` it is the endless stream of the epochs ``k, k + 1, ...``, each
    shuffled by ``(seed, epoch)`` (``distribute.epoch_stream``: train on it with
    ``steps_per_epoch=training_batches(...)``), so that a run resumed at epoch ``k``
    trains on the orders of the uninterrupted run (what :func:`train` does).
    """
    import tensorflow as tf

    if len(images) != len(labels):
        raise ValueError(f"images and labels differ in length: {len(images)} != {len(labels)}")
    seed = checks.integer_at_least("seed", seed, 0)  # (-1 was numpy's traceback)
    train, test = split_indices(len(images), test_fraction, seed, hold_out)
    examples = tf.data.Dataset.from_tensor_slices((images[train], labels[train]))
    batches = distribute.even_batch_count(len(train), batch_size, replicas)

    def one_pass(pass_seed, redraw):
        shuffled = examples.shuffle(len(train), seed=pass_seed, reshuffle_each_iteration=redraw)
        return distribute.even_batches(shuffled.batch(batch_size), replicas, batches)

    train_ds = distribute.prefetched(distribute.training_epochs(one_pass, seed, batches, first_epoch))
    test_ds = distribute.prefetched(tf.data.Dataset.from_tensor_slices((images[test], labels[test])).batch(batch_size))
    return (
        distribute.distribute_dataset_options(train_ds),
        distribute.distribute_dataset_options(test_ds),
    )


def compile_model(model, learning_rate=3e-3):
    # a negative or zero rate trained uphill or not at all without a word (tune --fixed
    # learning_rate=-0.01); an integer rate (--fixed learning_rate=1) was refused by Keras
    learning_rate = checks.learning_rate(learning_rate)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def fit_held_out(images, labels, *, seed=0, epochs=25, batch_size=32, learning_rate=3e-3, verbose=0,
                 **model_options):
    """Trains the demo's model on its training part less the held-out fifth, validating on that fifth.

    The recipe of :func:`train` (seeded weights, Adam, the seeded epoch stream) on
    ``make_datasets(hold_out=True)``, in memory: no run directory, no backup, and the
    test digits are never touched, so the figures may choose a setting. Returns the
    model and the ``History`` (``val_accuracy`` per epoch); the training and validation
    indices are ``split_indices(len(images), seed=seed, hold_out=True)``.
    ``model_options`` go to :func:`build_model` (e.g. ``hidden_norm=False``).
    """
    keras.utils.set_random_seed(seed)
    train_ds, val_ds = make_datasets(images, labels, batch_size, seed=seed, hold_out=True, first_epoch=0)
    steps = training_batches(len(images), batch_size, seed=seed, hold_out=True)
    model = compile_model(build_model(input_shape=images.shape[1:], **model_options), learning_rate)
    history = model.fit(train_ds, steps_per_epoch=steps, epochs=epochs, validation_data=val_ds,
                        verbose=verbose, shuffle=False)  # (shuffled by the stream)
    return model, history


def save_atomically(model, path):
    """Saves a ``.keras`` file so that a crash mid-write never replaces a good file."""
    fault_tolerance.save_model_atomically(model, path)


# plot_history marks every epoch of histories up to this long (longer ones: lines only)
_MARKED_EPOCHS = 30


def plot_history(history, path, accuracy="accuracy", held_out="val"):
    """Writes loss and accuracy curves (train and validation) to a PNG (atomically).

    ``accuracy`` names the accuracy metric in ``history`` (e.g. ``"digit_accuracy"``
    for a model's output ``digit``); when the history has none (textured_mnist without
    a classifier), only the loss is drawn. ``held_out`` names the ``val_`` curves in the
    legend: ``"test"`` for a run that passes its test data to ``fit`` to watch them
    (nothing is chosen on them), which the legend called validation data.
    """
    from matplotlib.ticker import MaxNLocator

    metrics = ["loss"] + [accuracy] * any(history.get(p + accuracy) for p in ("", "val_"))
    fig, axes = plotting.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 3.5), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for prefix, style in (("", "-"), ("val_", "--")):
            values = history.get(prefix + metric)
            if values:
                label = f"{held_out}_{metric}" if prefix else f"train_{metric}"
                # a marker on every epoch of a short run: a run of one epoch drew a line
                # of one point, which shows nothing
                marker = {"marker": "o", "markersize": 4} if len(values) <= _MARKED_EPOCHS else {}
                ax.plot(range(1, len(values) + 1), values, style, label=label, **marker)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs, not 1.2, 1.4, ...
        ax.set_title(metric)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    plotting.save_and_close(fig, path, dpi=100, format="png")


MODEL_OPTIONS = ("filters", "primary_capsules", "hidden_capsules", "pose_size", "n_iters", "hidden_norm")


def _check_model_options(model_options):
    """``model_options`` of :func:`train` as a new dict, if it is None or a mapping of
    :func:`build_model`'s own options (the others are train's or the data's)."""
    if model_options is None:
        return {}
    if not isinstance(model_options, collections.abc.Mapping):
        raise InputError(f"`model_options` must be a dict of build_model's options. "
                         f"Received: model_options={model_options!r}")
    known = (*MODEL_OPTIONS, "synchronized_batchnorm")
    unknown = sorted(str(name) for name in model_options if name not in known)
    if unknown:  # (input_shape and num_classes follow the data; a typo was a TypeError)
        raise InputError(f"`model_options` takes {', '.join(known)}. "
                         f"Received: model_options with {', '.join(unknown)}")
    return dict(model_options)


@leaves_no_empty_run_dir()
@arguments.trains_under_precision
def train(
    run_dir="runs/demo",
    epochs=25,
    batch_size=32,
    learning_rate=3e-3,
    seed=0,
    verbose=1,
    strategy=None,
    data_dir=None,
    limit=None,
    save_freq="epoch",
    model_options=None,
    callbacks=(),
    precision=None,
):
    """Trains the demo and writes its outputs to ``run_dir``.

    Writes ``model.keras`` (the trained model), ``history.png`` (learning curves),
    ``history.csv`` (one row per epoch), ``metrics.json`` (with ``split``: the seed,
    data directory, limit and test fraction of the train/test split, which
    :func:`evaluate` reuses) and TensorBoard logs under
    ``logs/``. Until those are written, ``backup/`` holds the state to resume from:
    calling ``train`` again with the same ``run_dir`` after a crash continues where it
    stopped (after the last epoch: trains nothing and writes the outputs). It is
    deleted last (``fault_tolerance.finish_run``): a later call starts a new run.
    The backup records ``batch_size``, ``learning_rate``, ``seed``, ``limit``, the
    fingerprint of the data (``mnist_digits.arrays_fingerprint``: the same files in another
    ``data_dir`` are the same data) and the ``model_options``: resuming it with other
    values raises ``fault_tolerance.BackupMismatchError`` (one line on the command line).

    Args:
        run_dir: output directory (other workers of a multi-worker cluster write below
            ``run_dir/workers/``).
        epochs: total number of epochs (a resumed run trains the remaining ones).
        batch_size: examples per replica and step; the global batch is
            ``batch_size x strategy.num_replicas_in_sync``.
        learning_rate: Adam's learning rate.
        seed: an integer >= 0: seeds the weights, the train/test split and the shuffling.
        verbose: 0 (silent) or 1 (progress bars).
        strategy: a ``tf.distribute.Strategy`` (None: the default strategy).
        data_dir: None for scikit-learn's 8x8 digits, or a directory with the MNIST
            ``t10k`` IDX files.
        limit: use only the first ``limit`` examples.
        save_freq: ``"epoch"`` or a number of steps between backups.
        model_options: keyword arguments of :func:`build_model` (``filters``,
            ``hidden_capsules``, ``n_iters``, ...).
        callbacks: extra Keras callbacks (after the backup and the CSV logger); the
            backups among them go with the run's (``fault_tolerance.finish_run``).
        precision: ``"float32"``, ``"mixed_float16"`` or ``"mixed_bfloat16"``, the Keras
            dtype policy the run builds, trains and saves its model under (its outputs in
            float32); None (the default): the global one. See
            ``applications.arguments.trains_under_precision``.

    Returns:
        A dict with the test accuracy, the parameter count, the epochs and the paths.

    Raises:
        InputError (a ValueError), before the run directory is made: ``epochs`` is
            not an integer >= 1, ``seed`` not an integer >= 0, ``model_options`` not
            a dict of :func:`build_model`'s options (``MODEL_OPTIONS`` and
            ``synchronized_batchnorm``) or one of them bad (the model is built before
            the run directory is made).
    """

    # epochs=0 wrote and scored an untrained model; -1 and 1.5 failed inside fit, after
    # the run directory, its logs and a backup were written; seed=True was taken (and
    # recorded as the split's seed), -1 and 1.5 raw errors of Keras' seeding
    epochs = checks.integer_at_least("epochs", epochs, 1)
    seed = checks.integer_at_least("seed", seed, 0)
    model_options = _check_model_options(model_options)
    callbacks = checks.callback_list(callbacks)  # (None: none; [*None] was a TypeError after the run directory)
    strategy = distribute.resolve_strategy(strategy)
    keras.utils.set_random_seed(seed)
    out = distribute.output_dir(run_dir, strategy)
    images, labels = load_arrays(data_dir, limit)
    global_batch = distribute.global_batch_size(batch_size, strategy)
    replicas = strategy.num_replicas_in_sync
    steps = training_batches(len(images), global_batch, seed=seed, replicas=replicas)  # (checks the split first)
    # every model option recorded, as the command line (which passes them all) records them:
    # a Python call that leaves one at its default resumes the same command line's backup
    defaults = inspect.signature(build_model).parameters
    model_options = {**{name: defaults[name].default for name in MODEL_OPTIONS}, **model_options}
    model_options.setdefault("synchronized_batchnorm", strategy.num_replicas_in_sync > 1)
    with strategy.scope():
        model = compile_model(build_model(input_shape=images.shape[1:], **model_options), learning_rate)
    # the run directory after the model: a bad model option (filters=0) left an empty one
    create_run_dir(out)
    paths = {
        "model": os.path.join(out, "model.keras"),
        "plot": os.path.join(out, "history.png"),
        "history": os.path.join(out, fault_tolerance.HISTORY_CSV),
        "metrics": os.path.join(out, "metrics.json"),
        "logs": os.path.join(out, "logs"),
    }
    # named as the command line's options (the model options are its --filters, ...)
    # and the data, by their fingerprint: the 8x8 digits, or MNIST's files wherever they
    # are (a backup of the 8x8 digits resumed with data_dir=MNIST trained its last epochs on
    # MNIST, and the run recorded MNIST's split for all of it; one that recorded the
    # folder refused the same files moved to another)
    recorded = {"batch_size": batch_size, "learning_rate": learning_rate, "seed": seed, "limit": limit,
                "data_fingerprint": arrays_fingerprint(data_dir), **model_options}
    recorded.pop("synchronized_batchnorm")  # follows the strategy, which a resumed run may change
    resumable = fault_tolerance.resumable_callbacks(out, save_freq=save_freq, run_options=recorded, epochs=epochs)
    # the epochs a resumed run trains are shuffled as the uninterrupted run's (distribute.epoch_stream)
    train_ds, test_ds = make_datasets(images, labels, global_batch, seed=seed, replicas=replicas,
                                      first_epoch=fault_tolerance.resume_epoch(resumable, epochs))
    # (and a mid-epoch backup's epoch goes on after the steps it had trained)
    train_ds = fault_tolerance.skip_trained_steps(train_ds, resumable, epochs)
    if verbose:
        print(
            f"{model.name}: {model.count_params():,} parameters; {len(images)} digits; "
            f"{strategy.num_replicas_in_sync} replica(s), global batch {global_batch}"
        )
        if fault_tolerance.backup_exists(out):
            print(f"resuming from the backup in {os.path.join(out, fault_tolerance.BACKUP_DIR)}")
    model.fit(
        train_ds,
        steps_per_epoch=steps,
        validation_data=test_ds,
        epochs=epochs,
        verbose=verbose,
        callbacks=[*resumable, keras.callbacks.TensorBoard(paths["logs"]), *callbacks], shuffle=False,
    )
    loss, accuracy = model.evaluate(test_ds, verbose=0)
    save_atomically(model, paths["model"])
    history, epoch_numbers = fault_tolerance.read_history_csv(paths["history"])
    plot_history(history, paths["plot"], held_out="test")  # (fit watches the test digits)
    result = {
        "test_accuracy": float(accuracy),
        "test_loss": float(loss),
        "parameters": int(model.count_params()),
        "epochs": epochs,
        "epochs_logged": epoch_numbers,
        "resumed_from_epoch": resumable[0].restored_epoch,
        "replicas": int(strategy.num_replicas_in_sync),
        "global_batch_size": global_batch,
        # What defines the train/test split: `evaluate` uses it (another split overlaps training digits).
        "split": {"seed": seed, "data_dir": None if data_dir is None else os.path.abspath(data_dir),
                  "limit": limit, "test_fraction": TEST_FRACTION},
        # and what its digits are: evaluate refuses other ones in that folder (checks.recorded_data)
        "data_fingerprint": recorded["data_fingerprint"],
        **paths,
    }
    fault_tolerance.write_metrics_json(result, paths["metrics"])
    fault_tolerance.finish_run([*resumable, *callbacks])  # the outputs are written: the backup goes
    return result


def evaluate(model_path, batch_size=64, seed=None, data_dir=None, limit=None, strategy=None, verbose=0):
    """Test accuracy of a saved demo model on the held-out digits (same split as ``train``).

    The split is the one recorded in ``metrics.json`` beside the model by ``train``:
    ``seed``, ``data_dir`` and ``limit`` default to the recorded ones, and values that
    differ are refused (``CommandLineError``): their test split would hold digits the
    model was trained on. A ``data_dir`` holding the recorded digits (the same files
    moved) is the same split; other digits where the run's were (its folder's files
    changed since) are refused (``InputError``, ``checks.recorded_data``). Without a
    record (a model from an older version, or moved away from its run directory) the
    given values are used (``seed`` None: 0), with a note on stderr.

    ``verbose``: 1 shows Keras' progress bars, on stderr (stdout keeps only the result);
    0 (the default) is silent.
    """

    if not os.path.exists(model_path):
        raise PathNotFoundError(f"no model at {model_path!r}: train one first with `keras-capsules train`")
    seed, data_dir, limit, note = _split_of(model_path, seed, data_dir, limit)
    # the digits of the run's folder changed since: not its test split (the same digits in the folder given are)
    checks.recorded_data(model_path, arrays_fingerprint(data_dir))
    # (checked where the test batches were made, after the digits and the model were loaded)
    batch_size = checks.integer_at_least("batch_size", batch_size, 1)
    strategy = distribute.resolve_strategy(strategy)
    images, labels = load_arrays(data_dir, limit)
    with strategy.scope():
        model = checks.load_model(model_path)
    # another application's model failed in Keras ("Exception encountered when calling ...")
    checks.require_model(
        model, model_path,
        lambda shapes, model: len(shapes) == 1 and checks.image_shape_matches(shapes[0], images.shape[1:])
        and checks.single_output_shape(model) == (None, NUM_CLASSES),
        "a demo model for these digits", "demo",
        f"images [batch, {', '.join(map(str, images.shape[1:]))}] in (those of --data-dir), "
        f"{NUM_CLASSES} class logits out",
    )
    if not model.compiled:  # saved uncompiled (build_model, then save): Keras' "You must call `compile()`"
        with strategy.scope():
            compile_model(model)
    if note:
        print(note, file=sys.stderr)
    _, test_ds = make_datasets(
        images, labels, distribute.global_batch_size(batch_size, strategy), seed=seed
    )
    with console.progress_on_stderr(verbose):
        loss, accuracy = model.evaluate(test_ds, verbose=verbose)
    return {"test_accuracy": float(accuracy), "test_loss": float(loss), "model": model_path, "seed": seed}


def _split_of(model_path, seed, data_dir, limit):
    """``(seed, data_dir, limit, note)`` of the train/test split that trained ``model_path``
    (``note``: what to tell the user when nothing recorded it, else None)."""
    given = {"seed": seed, "data_dir": None if data_dir is None else os.path.abspath(data_dir), "limit": limit}
    split, note = checks.recorded_split(
        model_path, given, holds_data=lambda path: checks.holds_recorded_data(model_path, arrays_fingerprint(path)))
    if note:  # as given (the path as the user wrote it)
        return split["seed"], data_dir, limit, note
    return split["seed"], split["data_dir"], split["limit"], None


# The command-line protocol (applications/registry.py).


def _hang_at(text):
    try:
        epoch, batch = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected EPOCH:BATCH, got {text!r}") from None
    return epoch, batch


def add_arguments(parser, command):
    """The demo's options for ``train``, ``evaluate`` and ``tune``."""
    from applications.arguments import positive_float, positive_int

    recorded = " (evaluate: default the one `train` recorded beside the model)" if command == "evaluate" else ""
    parser.add_argument(
        "--data-dir",
        default=None,
        help="directory with the MNIST t10k IDX files (28x28 digits); "
        "default: scikit-learn's 8x8 digits, no download" + recorded,
    )
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="use only the first N examples (quick runs)" + (recorded or "; default: all"))
    if command == "evaluate":
        # The split must be training's: by default the one `train` recorded beside the model.
        from applications.arguments import recorded_default

        recorded_default(parser, "seed", "seed of the train/test split (default: the one that `train` recorded "
                         "in metrics.json beside the model, else 0); another one is refused")
    if command == "train":
        parser.set_defaults(epochs=25)  # the recipe of train()
        parser.add_argument("--learning-rate", type=positive_float, default=3e-3,
                            help="Adam's learning rate (default: %(default)s)")
        parser.add_argument("--filters", type=positive_int, default=32, help="channels of the stem's convolutions (default: %(default)s)")
        parser.add_argument("--primary-capsules", type=positive_int, default=8,
                            help="capsules per location of the last feature map (default: %(default)s)")
        parser.add_argument("--hidden-capsules", type=positive_int, default=16,
                            help="capsules (of N x N poses) out of the first routing layer (default: %(default)s)")
        parser.add_argument("--pose-size", type=positive_int, default=4, help="poses are N x N matrices (default: %(default)s)")
        parser.add_argument("--n-iters", type=positive_int, default=2, help="EM routing iterations of both routing layers (default: %(default)s)")
        parser.add_argument("--no-hidden-norm", dest="hidden_norm", action="store_false",
                            help="leave the hidden capsules' scores unnormalized (the earlier model; "
                            "training stalls in about half the runs) (default: normalized)")
        parser.add_argument("--test-hang-at", type=_hang_at, default=None, help=argparse.SUPPRESS)


def run_train(args, strategy):
    callbacks = []
    if args.test_hang_at is not None:
        marker = os.path.join(args.run_dir, "hang.marker")
        callbacks.append(fault_tolerance.HangForTest(*args.test_hang_at, marker=marker))
    return train(
        run_dir=args.run_dir,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
        verbose=0 if args.quiet else 1,
        strategy=strategy,
        data_dir=args.data_dir,
        limit=args.limit,
        save_freq=args.save_freq,
        model_options={name: getattr(args, name) for name in MODEL_OPTIONS},
        callbacks=callbacks,
    )


def run_evaluate(args, strategy):
    return evaluate(
        args.model,
        batch_size=args.batch_size,
        seed=args.seed,
        data_dir=args.data_dir,
        limit=args.limit,
        strategy=strategy,
        verbose=0 if args.quiet else 1,
    )
