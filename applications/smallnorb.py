"""smallNORB: classifying stereo pairs of toys with EM-routed capsules (Heinsen 2019).

The model (the paper's Figure 3):

* the stereo pair ``[H, W, 2]`` with two coordinate channels (-1..1 horizontally and
  vertically) appended: ``[H, W, 4]``;
* six 3x3 convolutions of 64 channels with strides 1, 2, 1, 2, 1, 2, each preceded by
  batch normalization and followed by Swish;
* two 1x1 convolutions, each preceded by batch normalization, computing 64 scores and
  64 4x4 pose matrices at every location: ``H' * W' * 64`` part capsules;
* ``EMRouting`` from the variable number of parts (weights shared over inputs, so any
  image size works) to 64 capsules of 4x4, then ``EMRouting`` from those 64 (one set
  of weights per input) to 5 class capsules of 4x4;
* the class scores ``a_out`` are logits: the class probabilities are their softmax.

At 96x96 the model has 271,688 trainable parameters (the count of the authors' code)
plus 904 non-trainable batch-normalization statistics: 272,592 in all, the paper's
"273K". The count does not depend on the image size.

Training recipe: TFDS ``smallnorb`` (both images of the pair, label
``label_category``), 16 pixels of edge padding (the border pixels repeated, as the
authors' code) and a random 96x96 crop, the whole image at test, batches of
20, 50 epochs, mixup with Beta(0.2, 0.2), RAdam with a learning rate rising linearly
from 1e-5 to 5e-4 over the first 10% of steps then falling back to 1e-5 on a cosine,
cross-entropy of the softmax of the class scores.

The "reverse graphics" view (``plot_pose_trajectory``) projects the pose of a
class capsule with MDS as the viewpoint of an object changes;
``keras-capsules train smallnorb`` draws, to ``pose_trajectory.png``, the capsule of
the true class of the test object with the most azimuths
(``longest_viewpoint_sequence``), the same capsule in every view.

Reference:
    F. A. Heinsen, "An Algorithm for Routing Capsules in All Domains", 2019,
    arXiv:1911.00792.
"""

import collections.abc
import inspect
import logging
import numbers

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from applications import arguments, checks, console, distribute, plotting, tfds_data
from applications import training as train_utils
from applications.errors import InputError, PathNotFoundError, leaves_no_empty_run_dir, user_path
from keras_capsules.layers import EMRouting
from keras_capsules.optimizers import RAdam, one_cycle_schedule

logger = logging.getLogger(__name__)

IMAGE_SIZE = 96
NUM_CLASSES = 5
CLASS_NAMES = ("animal", "human", "airplane", "truck", "car")
BN_MOMENTUM = 0.9  # PyTorch's default (momentum 0.1 there), as the authors trained
PAPER_TRAINABLE_PARAMS = 271_688  # the authors' code; the paper rounds to 273K with BN statistics


# ------------------------------------------------------------------------- layers
def _unit_range(n):
    """``linspace(-1, 1, n)`` (``[-1]`` for ``n = 1``), also for a traced, unknown ``n``."""
    steps = ops.cast(ops.maximum(n - 1, 1), "float32")
    return -1.0 + ops.cast(ops.arange(n), "float32") * (2.0 / steps)


@keras.saving.register_keras_serializable(package="applications")
class CoordinateChannels(keras.layers.Layer):
    """Appends two channels of pixel coordinates, from -1 to 1, to ``[b, H, W, C]`` images.

    Channel ``C`` varies horizontally (left -1, right 1), channel ``C + 1`` vertically
    (top -1, bottom 1). Works for any (also unknown) ``H`` and ``W``.
    """

    def call(self, images):
        shape = ops.shape(images)
        height, width = shape[1], shape[2]
        # Written out (not ops.linspace): the TensorFlow backend's linspace tests its
        # ``num`` as a Python bool and fails when H or W is unknown (a traced graph).
        xs = _unit_range(width)
        ys = _unit_range(height)
        grid_x = ops.broadcast_to(ops.reshape(xs, (1, -1)), (height, width))
        grid_y = ops.broadcast_to(ops.reshape(ys, (-1, 1)), (height, width))
        grid = ops.cast(ops.stack([grid_x, grid_y], axis=-1), images.dtype)
        grid = ops.broadcast_to(grid[None], (shape[0], height, width, 2))
        return ops.concatenate([images, grid], axis=-1)

    def compute_output_shape(self, input_shape):
        channels = None if input_shape[-1] is None else input_shape[-1] + 2
        return tuple(input_shape[:-1]) + (channels,)


# -------------------------------------------------------------------------- model
def build_model(
    n_classes=NUM_CLASSES,
    n_parts=64,
    d_chns=64,
    image_channels=2,
    image_size=None,
    pose_size=4,
    n_iters=3,
    strides=(1, 2, 1, 2, 1, 2),
    routing_kwargs=None,
    name="smallnorb_capsules",
):
    """The paper's smallNORB classifier (defaults) or a variant of it.

    Args:
        n_classes: number of class capsules. Default 5.
        n_parts: part capsules per location, and capsules after the first routing.
            Default 64.
        d_chns: channels of the 3x3 convolutions. Default 64.
        image_channels: channels of the input images (2: the stereo pair). Default 2.
        image_size: fixed input size, or None (default) to accept any size.
        pose_size: capsule poses are ``pose_size x pose_size``. Default 4.
        n_iters: EM iterations of both routings. Default 3.
        strides: strides of the 3x3 convolutions (one per convolution).
        routing_kwargs: extra ``EMRouting`` arguments for both routings (e.g.
            initializers); default None: the paper's.
        name: model name.

    Returns:
        A ``keras.Model`` from images ``[batch, H, W, image_channels]`` to class scores
        (logits) ``[batch, n_classes]``. Its layer ``"class_routing"`` returns
        ``[a_out, mu_out, sig2_out]`` of the class capsules. The parameter count is
        logged at INFO level.

    Raises:
        InputError (a ValueError): an argument out of its range (:func:`check_model_arguments`),
            naming it: ``"... Received: name=value"``.
    """
    options = _model_arguments(n_classes=n_classes, n_parts=n_parts, d_chns=d_chns, image_channels=image_channels,
                               image_size=image_size, pose_size=pose_size, n_iters=n_iters, strides=strides,
                               routing_kwargs=routing_kwargs)
    n_classes, n_parts, d_chns, image_channels, image_size, pose_size, n_iters, strides, routing_kwargs = (
        options[name] for name in ("n_classes", "n_parts", "d_chns", "image_channels", "image_size", "pose_size",
                                   "n_iters", "strides", "routing_kwargs"))
    images = keras.Input((image_size, image_size, image_channels), name="images")
    x = CoordinateChannels(name="coordinates")(images)
    # As the authors' code: He-normal 3x3 kernels, and batch-normalization statistics
    # averaged with PyTorch's momentum (0.1 of each batch, Keras' momentum=0.9).
    for k, stride in enumerate(strides):
        x = keras.layers.BatchNormalization(momentum=BN_MOMENTUM, name=f"conv{k + 1}_bn")(x)
        x = keras.layers.Conv2D(
            d_chns, 3, strides=stride, padding="same", activation="silu",
            kernel_initializer="he_normal", name=f"conv{k + 1}",
        )(x)
    d_pose = pose_size * pose_size
    a = keras.layers.BatchNormalization(momentum=BN_MOMENTUM, name="scores_bn")(x)
    a = keras.layers.Conv2D(n_parts, 1, name="scores")(a)
    a = keras.layers.Reshape((-1,), name="part_scores")(a)  # [b, H' * W' * n_parts]
    mu = keras.layers.BatchNormalization(momentum=BN_MOMENTUM, name="poses_bn")(x)
    mu = keras.layers.Conv2D(n_parts * d_pose, 1, name="poses")(mu)
    mu = keras.layers.Reshape((-1, pose_size, pose_size), name="part_poses")(mu)
    a, mu, _ = EMRouting(
        n_out=n_parts, d_out=pose_size, n_iters=n_iters, name="part_routing", **routing_kwargs
    )([a, mu])
    a, _, _ = EMRouting(
        n_out=n_classes, d_out=pose_size, n_iters=n_iters, n_inp=n_parts, name="class_routing",
        dtype=arguments.output_dtype(),  # (float32 under a mixed policy: the logits the loss reads)
        **routing_kwargs,
    )([a, mu])
    model = keras.Model(images, a, name=name)
    counts = parameter_counts(model)
    logger.info(
        "%s: %d trainable + %d non-trainable = %d parameters",
        name, counts["trainable"], counts["non_trainable"], counts["total"],
    )
    return model


#: the ``EMRouting`` arguments that :func:`build_model` sets itself (not ``routing_kwargs``)
_ROUTING_ARGUMENTS = ("n_out", "d_out", "n_iters", "n_inp", "name")
#: :func:`build_model`'s arguments and defaults, which :func:`check_model_arguments` checks
_BUILD_MODEL_SIGNATURE = inspect.signature(build_model)


def check_model_arguments(**options):
    """Raises the ``InputError`` :func:`build_model` would raise for these options.

    Cheap (no layers are made), so that :func:`train` refuses a bad ``model_kwargs``
    before it reads any data. Takes :func:`build_model`'s keyword arguments; those not
    given are taken at their defaults (an unknown one is a ``TypeError``, as for
    :func:`build_model`).

    Raises:
        InputError (a ValueError): ``n_classes`` is not an integer >= 2 (a softmax over
            one class is always 1: nothing to learn); ``n_parts``, ``d_chns``,
            ``image_channels``, ``pose_size`` or ``n_iters`` not an integer >= 1;
            ``image_size`` neither None nor an integer >= 1; ``strides`` not a sequence
            of integers >= 1; ``routing_kwargs`` neither None nor a dict without the
            arguments the builder sets (``n_out``, ``d_out``, ``n_iters``, ``n_inp``,
            ``name``). Keras failed on most of them with an error about another name
            (``filters``, ``n_out``, a shape), and took ``d_chns=True``,
            ``image_channels=0`` and ``image_size=True``.
    """
    _model_arguments(**options)


def _model_arguments(**options):
    """:func:`build_model`'s arguments (defaults for those not given), checked and normalised."""
    bound = _BUILD_MODEL_SIGNATURE.bind(**options)
    bound.apply_defaults()
    args = dict(bound.arguments)
    args["n_classes"] = checks.integer_at_least("n_classes", args["n_classes"], 2)
    for name in ("n_parts", "d_chns", "image_channels", "pose_size", "n_iters"):
        args[name] = checks.integer_at_least(name, args[name], 1)
    if args["image_size"] is not None:
        args["image_size"] = checks.integer_at_least("image_size", args["image_size"], 1)
    strides = args["strides"]
    if isinstance(strides, np.ndarray):
        strides = strides.tolist()
    if (
        isinstance(strides, (str, bytes)) or not isinstance(strides, collections.abc.Sequence)
        or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 1 for s in strides)
    ):
        raise InputError("`strides` must be a sequence of integers >= 1 (one per 3x3 convolution). "
                         f"Received: strides={strides!r}")
    args["strides"] = tuple(int(s) for s in strides)
    routing_kwargs = args["routing_kwargs"]
    if routing_kwargs is not None and (
        not isinstance(routing_kwargs, collections.abc.Mapping) or set(routing_kwargs) & set(_ROUTING_ARGUMENTS)
    ):
        raise InputError(
            "`routing_kwargs` must be None or a dict of further EMRouting arguments (not "
            f"{', '.join(_ROUTING_ARGUMENTS)}, which the builder sets). Received: routing_kwargs={routing_kwargs!r}"
        )
    args["routing_kwargs"] = dict(routing_kwargs or {})
    return args


def parameter_counts(model):
    """``{"trainable", "non_trainable", "total"}`` parameter counts of a built model."""
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    non_trainable = sum(int(np.prod(w.shape)) for w in model.non_trainable_weights)
    return {"trainable": trainable, "non_trainable": non_trainable, "total": trainable + non_trainable}


def compile_model(model, total_steps, min_lr=1e-5, max_lr=5e-4, warmup_fraction=0.1):
    """The paper's regime: RAdam, one-cycle schedule, cross-entropy on softmax of scores."""
    model.compile(
        optimizer=RAdam(one_cycle_schedule(total_steps, min_lr, max_lr, warmup_fraction)),
        loss=keras.losses.CategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
    )
    return model


# --------------------------------------------------------------------------- data
def load_split(split, data_dir=None, download=True, shuffle_files=False, seed=None, decode_images=True,
               reshuffle_files=True):
    """The TFDS ``smallnorb`` split (``"train"``/``"test"``) as a dataset of feature dicts.

    ``seed`` seeds the order of the files when ``shuffle_files`` (None: another order
    in every run). ``reshuffle_files`` (default True, TFDS's default): the files come in
    a new order at every pass (every iterator made: a resumed process starts that
    sequence again); False: in the one order of ``seed`` at every pass (what
    :func:`train` reads with a seed, so that a resumed run reads the files as the
    uninterrupted run). ``decode_images=False`` leaves ``"image"`` and ``"image2"``
    PNG-encoded (scalar strings, decoded by :func:`stereo_pair`): a pass that reads
    only the labels then decodes no image.

    Raises:
        DataNotFoundError: without ``download``, smallNORB is not prepared in
            ``data_dir`` (one line naming the folder and how to prepare it, as the
            command line says it: ``applications.tfds_data.load``).
    """
    import tensorflow_datasets as tfds

    # ("False", a non-empty string, let TFDS download: minutes of retries offline)
    download = checks.true_or_false("download", download)
    decoders = None
    if not decode_images:
        decoders = {"image": tfds.decode.SkipDecoding(), "image2": tfds.decode.SkipDecoding()}
    reshuffle = None if reshuffle_files else False  # None: TFDS's default (tf.data's: True)
    read_config = tfds.ReadConfig(shuffle_seed=seed, shuffle_reshuffle_each_iteration=reshuffle)
    return tfds_data.load(
        "smallnorb", data_dir, download, split=split, shuffle_files=shuffle_files, read_config=read_config,
        decoders=decoders,
    )


def _decoded(image):
    """A ``[H, W, 1]`` uint8 image, decoded first if it is PNG-encoded (a scalar string)."""
    image = tf.convert_to_tensor(image)
    if image.dtype == tf.string:
        image = tf.io.decode_png(image, channels=1)
    return image


def stereo_pair(example, image_size=IMAGE_SIZE):
    """Both images of the pair as ``[image_size, image_size, 2]`` float32 in [0, 1].

    The images are uint8 ``[H, W, 1]`` or PNG-encoded (``load_split(decode_images=False)``).

    Raises:
        InputError (a ValueError): ``image_size`` is not an integer >= 1 (0 was a raw
            TensorFlow error from the resize, "output dimensions must be positive").
    """
    image_size = checks.integer_at_least("image_size", image_size, 1)
    pair = tf.concat([_decoded(example["image"]), _decoded(example["image2"])], axis=-1)
    pair = tf.cast(pair, tf.float32) / 255.0
    if image_size != IMAGE_SIZE:
        pair = tf.image.resize(pair, (image_size, image_size), antialias=True)
    return pair


def make_dataset(
    examples,
    training,
    batch_size=20,
    image_size=IMAGE_SIZE,
    padding=None,
    mixup_alpha=0.2,
    shuffle_buffer=4096,
    seed=None,
    repeat=False,
    first_epoch=None,
    steps_per_epoch=None,
):
    """Batches of ``(pairs [b, S, S, 2], one-hot labels [b, 5])`` from smallNORB examples.

    Training examples are shuffled (in a new order every epoch; ``shuffle_buffer``
    examples at a time), edge-padded by ``padding`` pixels (default 16, scaled with
    ``image_size / 96``; :func:`training_crop`) and cropped at random back to
    ``image_size``, then mixed up with Beta(``mixup_alpha``, ``mixup_alpha``) (None or 0
    disables mixup). ``seed`` makes the order, the crops and the mixing reproducible
    (an integer >= 0; None: other draws every run, without ``first_epoch`` only).

    Args:
        examples: feature dicts of a smallNORB split (:func:`load_split`).
        training: True for the shuffled, cropped, mixed training batches (of
            ``batch_size`` examples each, the last partial one left out); False for
            the test batches (whole images, in order, unmixed).
        batch_size, image_size, padding, mixup_alpha, shuffle_buffer, seed: as above.
        repeat: the examples over and over (an endless dataset; with ``training``, a
            new order, crops and mixing every pass). Ignored with ``first_epoch``.
        first_epoch: None (default): the passes are drawn by ``tf.data`` (``repeat`` or
            not), anew every time the dataset is iterated: a run resumed in a new
            process draws the passes of an earlier epoch again. An integer ``k``
            (training only, ``seed`` required): the endless stream of the run's
            training batches from (Keras) epoch ``k`` on, every pass over
            ``examples`` shuffled, cropped and mixed by ``(seed, pass)`` alone
            (``distribute.epoch_stream``): a run resumed at epoch ``k``
            (``fault_tolerance.resume_epoch``) trains on the batches of the
            uninterrupted run, as :func:`train` does. Train on it with
            ``fit(..., steps_per_epoch=steps_per_epoch)``. ``examples`` must come in
            the same order at every pass (``load_split(..., reshuffle_files=False)``)
            and be of known size.
        steps_per_epoch: with ``first_epoch``, the batches of an epoch (None: one pass,
            ``len(examples) // batch_size``). Epochs and passes need not align: the
            stream goes through the passes one after the other, and the stream from
            epoch ``k`` starts at batch ``k * steps_per_epoch`` of it (the batches
            before it in its pass are drawn and skipped).

    Raises:
        InputError (a ValueError), when the dataset is made (not when it is read):
            ``batch_size``, ``image_size``, ``shuffle_buffer`` or ``steps_per_epoch``
            not an integer >= 1, ``padding`` not None or an integer >= 0,
            ``mixup_alpha`` neither None nor a finite number >= 0, ``seed`` not an
            integer >= 0 (or None without ``first_epoch``), ``first_epoch`` without
            ``training`` or not an integer >= 0. (A bad size failed in tf.data, or
            with ``first_epoch`` only when the stream was read, inside its graph: a
            ``StagingError``.)

    The shuffle buffer holds the examples as read (the two uint8 images and the
    category: 18,440 bytes an example of smallNORB, 75.5 MB for 4096), and each is
    converted to float32 (resized to ``image_size``) and cropped only as it leaves the
    buffer: a quarter of the memory of buffering the float32 96x96 pairs (302 MB).
    Below ``image_size`` 48 the float32 pairs are the smaller (4,628 bytes at 24), and
    the buffer holds those. Shuffling is by position only, so the order, the crops and
    the mixing are the same either way, for the same seed.
    """
    # here, not in tf.data (1.5 and "a" were raw TensorFlow errors, with `first_epoch` only when
    # the stream was read; True and -1 were taken)
    seed = checks.stream_seed(seed, first_epoch if training else None)
    # here too: the training batches are made in a graph with `first_epoch` (epoch_stream),
    # where mixup's own refusal of mixup_alpha=-1 was a StagingError
    batch_size = checks.integer_at_least("batch_size", batch_size, 1)
    image_size = checks.integer_at_least("image_size", image_size, 1)
    shuffle_buffer = checks.integer_at_least("shuffle_buffer", shuffle_buffer, 1)
    # ("False", a non-empty string, was taken as on)
    training = checks.true_or_false("training", training)
    repeat = checks.true_or_false("repeat", repeat)
    if steps_per_epoch is not None:
        steps_per_epoch = checks.integer_at_least("steps_per_epoch", steps_per_epoch, 1)
    if mixup_alpha is not None:
        mixup_alpha = checks.finite_number("mixup_alpha", mixup_alpha, positive=False)
    if padding is None:
        padding = int(round(16 * image_size / IMAGE_SIZE))
    padding = checks.integer_at_least("padding", padding, 0)

    def label_of(example):
        return tf.one_hot(example["label_category"], NUM_CLASSES)

    def prepare(example):
        return stereo_pair(example, image_size), label_of(example)

    if not training:
        if first_epoch is not None:
            raise InputError("`first_epoch` is for training batches: pass `training=True` or no `first_epoch`")
        ds = examples.map(prepare, num_parallel_calls=tf.data.AUTOTUNE)
        if repeat:
            ds = ds.repeat()
        return distribute.prefetched(ds.batch(batch_size))

    # only the features used, as read: the buffer holds no other labels
    examples = examples.map(lambda ex: {k: ex[k] for k in ("image", "image2", "label_category")})
    if _buffered_bytes(examples.element_spec) > 4 * (2 * image_size * image_size + NUM_CLASSES):
        examples = examples.map(prepare, num_parallel_calls=tf.data.AUTOTUNE)  # small float32 pairs: fewer bytes

    def crop(element, crop_seed):
        pair, label = element if isinstance(element, tuple) else prepare(element)
        return training_crop(pair, padding, image_size, crop_seed), label

    def batches(seed, repeat):
        ds = examples.shuffle(shuffle_buffer, seed=seed)  # reshuffled at every pass (epoch)
        if repeat:
            ds = ds.repeat()
        # new crops every epoch (without it each pass repeated the first one's), reproducible
        crop_seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2, drop_remainder=True)
        ds = tf.data.Dataset.zip((ds, crop_seeds)).map(crop, num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.batch(batch_size, drop_remainder=True)
        if mixup_alpha:
            ds = train_utils.mixup(ds, alpha=mixup_alpha, seed=seed)
        return ds

    if first_epoch is None:
        return distribute.prefetched(batches(seed, repeat))
    first_epoch = checks.integer_at_least("first_epoch", first_epoch, 0)
    n = int(examples.cardinality())
    if n < 0:
        raise InputError("the number of training examples is unknown: `first_epoch` needs examples of known size")
    pass_batches = n // batch_size
    if pass_batches < 1:
        raise InputError(f"{n} training example(s) are fewer than one batch of {batch_size}")
    steps = pass_batches if steps_per_epoch is None else steps_per_epoch
    first_pass, skipped = divmod(first_epoch * steps, pass_batches)
    stream = distribute.epoch_stream(
        lambda epoch: batches(distribute.epoch_seed(seed, epoch), repeat=False), pass_batches, first_pass
    )
    return distribute.prefetched(stream.skip(skipped) if skipped else stream)


def _buffered_bytes(element_spec):
    """Bytes of one element of ``element_spec``; 0 when unknown (strings such as encoded
    images, shapes not known)."""
    specs = tf.nest.flatten(element_spec)
    if any(s.dtype == tf.string or not s.shape.is_fully_defined() for s in specs):
        return 0
    return sum(s.shape.num_elements() * s.dtype.size for s in specs)


def training_crop(pair, padding, image_size, seed=None):
    """A random ``image_size`` crop of the pair padded by ``padding`` pixels on every side.

    The padding repeats the border pixels (the authors' code: torchvision's
    ``RandomCrop(96, padding=16, padding_mode="edge")``); zero padding drew black
    borders, which the grey backgrounds of smallNORB never show, into nearly every
    training crop and never into a test image. Both images get the same crop.
    ``seed`` (a shape-``[2]`` integer seed) makes the crop stateless.
    """
    for arg, value, least in (("padding", padding, 0), ("image_size", image_size, 1)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
            raise InputError(f"`{arg}` must be an integer >= {least}. Received: {arg}={value!r}")
    pair = tf.convert_to_tensor(pair)
    if any(dim is not None and image_size > dim + 2 * padding for dim in pair.shape[:2]):
        raise InputError(
            f"`image_size` must be at most the padded pair's height and width. Received: "
            f"image_size={image_size}, padding={padding}, pair shape={pair.shape}"
        )
    shape = tf.shape(pair)
    # the crop's top-left corner in the padded pair: 0 .. (side + 2 * padding - image_size)
    limits = shape[:2] + 2 * padding - image_size
    if seed is None:
        draws = tf.random.uniform([2])
    else:
        draws = tf.random.stateless_uniform([2], seed)
    corner = tf.minimum(tf.cast(draws * tf.cast(limits + 1, tf.float32), tf.int32), limits)
    # rows and columns of the padded pair, read from the pair with clipped indices: edge padding
    rows = tf.clip_by_value(tf.range(image_size) + corner[0] - padding, 0, shape[0] - 1)
    cols = tf.clip_by_value(tf.range(image_size) + corner[1] - padding, 0, shape[1] - 1)
    return tf.gather(tf.gather(pair, rows, axis=0), cols, axis=1)


# -------------------------------------------------------------------------- train
@leaves_no_empty_run_dir()
@arguments.trains_under_precision
def train(
    data_dir=None,
    run_dir="runs/smallnorb",
    epochs=50,
    batch_size=20,
    image_size=IMAGE_SIZE,
    steps_per_epoch=None,
    validation_steps=None,
    mixup_alpha=0.2,
    seed=None,
    verbose=1,
    download=True,
    model_kwargs=None,
    strategy=None,
    callbacks=(),
    precision=None,
):
    """Trains the paper's model on smallNORB with the paper's recipe.

    Args:
        data_dir: TFDS data directory (None: TFDS's default).
        run_dir: directory for TensorBoard logs (``run_dir/logs``), the model
            (``run_dir/model.keras``, saved after every epoch) and, at the end,
            ``run_dir/metrics.json`` with the ``image_size`` and the number of test
            pairs scored (``test_examples``) that :func:`evaluate` uses by default.
        epochs: number of epochs. Default 50.
        batch_size: default 20.
        image_size: side of the (square) training crops; 96 is the dataset's size,
            smaller sizes resize the images first (for quick experiments).
        steps_per_epoch, validation_steps: limits per epoch (None: whole splits).
        mixup_alpha: mixup's Beta parameter (None or 0: no mixup). Default 0.2.
        seed: an integer >= 0, the seed of the weights, of the order of the training
            files and of shuffling, cropping and mixup: the same seed trains the same
            model (None: unseeded).
            With a seed, the training files are read in the seed's order at every
            pass and every pass over them is drawn (shuffled, cropped, mixed) from
            ``(seed, pass)`` (``make_dataset(..., first_epoch=...)``): a run resumed
            from the backup of a ``fault_tolerance.AtomicBackupAndRestore`` among
            ``callbacks`` at epoch ``k`` trains epochs ``k, k + 1, ...`` on the
            batches of the uninterrupted run, and ends with its weights. Without a
            seed (nothing to draw them again from) the passes are drawn anew by
            ``tf.data`` (the files in a new order every pass): a resumed run trains
            on other draws, from those of its first epoch on.
        verbose: ``model.fit``'s verbosity: 0 (silent), 1 (progress bars) or 2 (a line
            per epoch); Python or numpy, not a bool.
        download: let TFDS download and prepare the data if it is missing.
        model_kwargs: arguments of ``build_model`` (default: the paper's model).
        strategy: a ``tf.distribute.Strategy``; the model is built and compiled in its
            scope (``batch_size`` is then the global batch). None: the default one.
        callbacks: extra Keras callbacks (after the TensorBoard logs and checkpoint).
            The epoch a backup among them resumes at (``fault_tolerance.resume_epoch``)
            is where the training stream starts (see ``seed``). The backup of
            ``fault_tolerance.resumable_callbacks`` outlives ``fit``: call
            ``fault_tolerance.finish_run(callbacks)`` once the outputs are written
            (``run_train`` does).
        precision: ``"float32"``, ``"mixed_float16"`` or ``"mixed_bfloat16"``, the Keras
            dtype policy the run builds, trains and saves its model under (its outputs in
            float32); None (the default): the global one. See
            ``applications.arguments.trains_under_precision``.

    Returns:
        ``(model, history)``.

    Raises:
        InputError (a ValueError), before any data is read: ``epochs``, ``batch_size``,
            ``image_size``, ``steps_per_epoch`` or ``validation_steps`` not an integer
            >= 1, ``verbose`` not 0, 1 or 2, ``mixup_alpha`` neither None nor a finite number >= 0, ``seed``
            neither None nor an integer >= 0, ``model_kwargs`` that
            :func:`build_model` refuses (:func:`check_model_arguments`).
        DataNotFoundError: without ``download``, smallNORB is not prepared in ``data_dir``.
    """
    # checked before any data is read: batch_size=0 was a ZeroDivisionError, with
    # steps_per_epoch a tf.data InvalidArgumentError, a negative one "Dimension -4 must be >= 0";
    # mixup_alpha=-1 a StagingError from the training stream's graph; seed=True was taken,
    # -1 and 1.5 raw errors of Keras' seeding
    epochs = checks.integer_at_least("epochs", epochs, 1)
    batch_size = checks.integer_at_least("batch_size", batch_size, 1)
    image_size = checks.integer_at_least("image_size", image_size, 1)
    if steps_per_epoch is not None:
        steps_per_epoch = checks.integer_at_least("steps_per_epoch", steps_per_epoch, 1)
    if validation_steps is not None:
        validation_steps = checks.integer_at_least("validation_steps", validation_steps, 1)
    if mixup_alpha is not None:
        mixup_alpha = checks.finite_number("mixup_alpha", mixup_alpha, positive=False)
    verbose = checks.verbosity(verbose)  # ("no" and -1 were taken by fit, and hid its progress)
    callbacks = checks.callback_list(callbacks)  # (None: none; [*None] was a TypeError after the run directory)
    seed = checks.stream_seed(seed)
    if model_kwargs is not None and not isinstance(model_kwargs, dict):
        raise InputError(f"`model_kwargs` must be None or a dict of build_model's arguments. "
                         f"Received: model_kwargs={model_kwargs!r}")
    check_model_arguments(**(model_kwargs or {}))
    if seed is not None:  # the initial weights too, as the other applications
        keras.utils.set_random_seed(seed)
    # with a seed, the files in one order (the seed's) at every pass: the passes of a
    # resumed run (a new process, which restarts tf.data's reshuffles) are the same
    train_examples = load_split("train", data_dir, download, shuffle_files=True, seed=seed,
                                reshuffle_files=seed is None)
    test_examples = load_split("test", data_dir, download)
    if steps_per_epoch is None:
        n_train = int(train_examples.cardinality())
        if n_train < 0:
            raise InputError("The size of the training split is unknown: pass `steps_per_epoch`.")
        steps_per_epoch = n_train // batch_size
        if steps_per_epoch < 1:  # fit would loop forever on the repeated dataset
            raise InputError(
                f"the smallNORB training split ({n_train} examples) is smaller than one batch of "
                f"{batch_size}: lower the batch size or pass `steps_per_epoch` (--steps-per-epoch)"
            )
    # a seeded run's stream starts at the epoch it resumes at (from (seed, pass)); an
    # unseeded one draws anew (see the docstring)
    import os

    from applications import fault_tolerance

    first_epoch = None if seed is None else fault_tolerance.resume_epoch(callbacks, epochs)
    train_ds = make_dataset(
        train_examples, True, batch_size, image_size, mixup_alpha=mixup_alpha, seed=seed, repeat=True,
        first_epoch=first_epoch, steps_per_epoch=steps_per_epoch,
    )
    # (and a mid-epoch backup's epoch goes on after the steps it had trained)
    train_ds = fault_tolerance.skip_trained_steps(train_ds, callbacks, epochs)
    test_ds = make_dataset(test_examples, False, batch_size, image_size)
    if validation_steps is not None:
        # the first batches only, each once (repeat() counted a split of fewer batches twice)
        test_ds = test_ds.take(validation_steps)

    strategy = distribute.resolve_strategy(strategy)
    # whole batches (drop_remainder): cut only when the replicas do not divide batch_size
    train_ds = distribute.even_batches(train_ds, strategy.num_replicas_in_sync)
    with strategy.scope():
        model = build_model(**(model_kwargs or {}))
        compile_model(model, total_steps=max(2, epochs * steps_per_epoch))
    history = model.fit(
        distribute.distribute_dataset_options(train_ds),
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        validation_data=test_ds,
        callbacks=[*train_utils.run_callbacks(run_dir), *callbacks],
        verbose=verbose, shuffle=False,
    )
    # What `evaluate` reads beside the model (`run_train` writes its fuller record over it):
    # a run from Python recorded nothing, and evaluate scored every test pair at 96x96,
    # whatever image size and test pairs train had used.
    fault_tolerance.write_metrics_json(
        {"epochs": epochs, "image_size": image_size, "test_examples": scored_test_examples(validation_steps, batch_size)},
        os.path.join(run_dir, "metrics.json"),
    )
    return model, history


def scored_test_examples(validation_steps, batch_size):
    """The number of test pairs ``train`` scores (None: all): what ``metrics.json``
    records as ``test_examples``, and ``evaluate`` scores by default."""
    return None if validation_steps is None else validation_steps * batch_size


# ---------------------------------------------------------------- reverse graphics
def class_capsule_poses(model, images, class_index=None, batch_size=32):
    """Poses of the activated class capsule: ``(poses [n, pose_size**2], classes [n])``.

    The activated capsule is the argmax of the class scores of each image, or
    ``class_index`` for every image if given.
    """
    routing = model.get_layer("class_routing")
    probe = keras.Model(model.inputs, routing.output)
    a_out, mu_out, _ = probe.predict(np.asarray(images, "float32"), batch_size=batch_size, verbose=0)
    if class_index is not None:
        # 7 of 5 classes was a raw IndexError, and -1 recorded -1 as the class of every image
        class_index = checks.integer_at_least("class_index", class_index, 0)
        if class_index >= a_out.shape[-1]:
            raise InputError(f"`class_index` must be a class of the model, in [0, {a_out.shape[-1]}). "
                             f"Received: class_index={class_index}")
    classes = np.argmax(a_out, axis=-1) if class_index is None else np.full(len(a_out), class_index)
    poses = mu_out[np.arange(len(mu_out)), classes].reshape(len(mu_out), -1)
    return poses, classes


def _mds_2d(points, seed):
    from sklearn.manifold import MDS

    try:
        mds = MDS(n_components=2, random_state=seed, init="classical_mds")
    except TypeError:  # scikit-learn < 1.8
        mds = MDS(n_components=2, random_state=seed, n_init=4)
    return mds.fit_transform(np.asarray(points, np.float64))


def plot_pose_trajectory(model, images, path, labels=None, class_index=None, title=None, seed=0):
    """Plots the 2-D MDS projection of the class-capsule pose along an image sequence.

    ``images`` is a sequence of stereo pairs that differ only in one viewpoint
    parameter (azimuth or elevation), in order; ``labels`` (e.g. the angles) annotate
    the points. The pose (``mu_out`` of the last routing, flattened) of class capsule
    ``class_index`` (None: of each image's highest-scoring capsule, which is another
    capsule wherever the scores change their winner) in every image is projected to
    2-D with metric MDS and drawn as a trajectory, written to ``path`` as a PNG.

    Returns:
        The projected points ``[n, 2]``.
    """
    if len(images) < 2:  # (one image was an IndexError inside the MDS)
        raise InputError(f"a pose trajectory needs two images or more. Received: {len(images)} image(s)")
    if labels is not None and len(labels) != len(images):  # (the extra points went unlabelled)
        raise InputError(f"`labels` must hold one label per image ({len(images)}). Received: {len(labels)} labels")
    poses, classes = class_capsule_poses(model, images, class_index)
    points = _mds_2d(poses, seed)
    fig, ax = plotting.subplots(figsize=(5, 5), dpi=100)
    ax.plot(points[:, 0], points[:, 1], "-", color="0.6", zorder=1)
    scatter = ax.scatter(
        points[:, 0], points[:, 1], c=np.arange(len(points)), cmap="viridis", zorder=2
    )
    fig.colorbar(scatter, ax=ax, label="position in the sequence")
    if labels is not None:
        for (px, py), label in zip(points, labels):
            ax.annotate(str(label), (px, py), textcoords="offset points", xytext=(3, 3), fontsize=7)
    names = sorted({CLASS_NAMES[c] if c < len(CLASS_NAMES) else str(c) for c in classes})
    ax.set_title(title or f"class-capsule pose (MDS), class: {', '.join(names)}")
    ax.set_xlabel("MDS 1")
    ax.set_ylabel("MDS 2")
    plotting.save_and_close(fig, path, format="png")  # tight: long titles and tick labels stay inside
    return points


def viewpoint_sequence(examples, vary="azimuth", instance=None, category=None, elevation=0,
                       azimuth=0, lighting=0, image_size=IMAGE_SIZE, max_examples=None, verbose=0):
    """Stereo pairs of one object that differ only in azimuth (or elevation), in order.

    Args:
        examples: a TFDS smallnorb split (feature dicts), e.g. ``load_split("test")``;
            the images may be PNG-encoded (``load_split(..., decode_images=False)``):
            only the pairs returned are then decoded.
        vary: ``"azimuth"`` or ``"elevation"``.
        instance, category: the object (default: those of the first example; when only
            one is given, the object of the first example that has it).
        elevation, azimuth, lighting: the fixed viewpoint labels (the one that varies is
            ignored).
        image_size: size of the returned pairs.
        max_examples: stop scanning after this many examples (None: the whole split).
        verbose: 1 or 2 shows a progress bar over the examples read (Keras' ``Progbar``,
            on ``sys.stdout``); 0 (default) is silent. Another value is refused with an
            ``InputError`` (:func:`applications.checks.verbosity`).

    Returns:
        ``(pairs [n, S, S, 2], values [n])`` sorted by the varying label; the first
        example of each value is taken.
    """
    if vary not in ("azimuth", "elevation"):
        raise InputError(f"`vary` must be 'azimuth' or 'elevation'. Received: vary={vary!r}")
    verbose = checks.verbosity(verbose)  # ("no" showed the progress bar)
    fixed = {"label_lighting": lighting}
    fixed["label_elevation" if vary == "azimuth" else "label_azimuth"] = (
        elevation if vary == "azimuth" else azimuth
    )
    found = {}
    it = examples if max_examples is None else examples.take(max_examples)
    progress = console.progress_bar(it, "example", verbose)
    read = 0
    for ex in it.as_numpy_iterator():
        read += 1
        if progress is not None and read % 256 == 0:
            progress.update(read)
        if instance is None or category is None:
            # the object of the first example that has the instance or category given (a
            # category alone was overridden by the first example's, another category's object)
            if (instance is not None and int(ex["instance"]) != instance) or (
                category is not None and int(ex["label_category"]) != category
            ):
                continue
            instance, category = int(ex["instance"]), int(ex["label_category"])
        if int(ex["instance"]) != instance or int(ex["label_category"]) != category:
            continue
        if any(int(ex[k]) != v for k, v in fixed.items()):
            continue
        found.setdefault(int(ex[f"label_{vary}"]), stereo_pair(ex, image_size).numpy())
    if progress is not None:
        progress.update(read, finalize=True)
    values = sorted(found)
    if not values:
        return np.zeros((0, image_size, image_size, 2), "float32"), np.zeros((0,), "int64")
    return np.stack([found[v] for v in values]), np.asarray(values)


def longest_viewpoint_sequence(examples, vary="azimuth", image_size=IMAGE_SIZE, max_examples=None, verbose=0):
    """The longest :func:`viewpoint_sequence` in ``examples``: that of the object, lighting
    and fixed angle with the most values of ``vary``.

    One pass over ``examples`` (a TFDS smallnorb split) reads the labels, in batches,
    and notes the values of every object and viewpoint and where each first occurs; a
    second read, which stops at the last example of the chosen sequence, takes that
    sequence's pairs (the first example of each value, as :func:`viewpoint_sequence`).
    Load the split with ``load_split(..., decode_images=False)`` and only those pairs
    are decoded; decoded images are read up to that example twice. ``examples`` must
    come in the same order at every pass (a split read without ``shuffle_files``).
    Ties go to the smallest (instance, category, fixed angle, lighting).

    ``verbose``: 1 or 2 shows the progress of both reads (Keras' ``Progbar``, on
    ``sys.stdout``); 0 (default) is silent.

    Returns:
        ``(pairs [n, S, S, 2], values [n], description, category)``; ``description`` names
        the object and the fixed labels, ``category`` is the object's ``label_category``
        (its true class: the class capsule whose pose to draw). ``""`` and None when
        ``examples`` is empty.

    Raises:
        InputError: if ``vary`` is neither ``"azimuth"`` nor ``"elevation"``, if
            ``verbose`` is not 0, 1 or 2 (:func:`applications.checks.verbosity`), or if the
            second read found other examples than the first (another order).
    """
    if vary not in ("azimuth", "elevation"):
        raise InputError(f"`vary` must be 'azimuth' or 'elevation'. Received: vary={vary!r}")
    verbose = checks.verbosity(verbose)  # (before the first read)
    fixed = "label_elevation" if vary == "azimuth" else "label_azimuth"
    keys = ("instance", "label_category", fixed, "label_lighting", f"label_{vary}")
    labels = examples if max_examples is None else examples.take(max_examples)
    progress = console.progress_bar(labels, "example", verbose)
    if verbose:
        print(f"Finding the longest {vary} sequence: reading the labels")
    labels = labels.map(lambda ex: tuple(ex[k] for k in keys))  # images: neither decoded nor copied
    first = {}  # (instance, category, fixed angle, lighting) -> {value: index of its first example}
    index = 0
    for batch in labels.batch(4096).as_numpy_iterator():
        for *key, value in zip(*(column.tolist() for column in batch)):
            first.setdefault(tuple(key), {}).setdefault(value, index)
            index += 1
        if progress is not None:
            progress.update(index)
    if progress is not None:
        progress.update(index, finalize=True)
    if not first:
        return np.zeros((0, image_size, image_size, 2), "float32"), np.zeros((0,), "int64"), "", None
    chosen = min(first, key=lambda key: (-len(first[key]), key))
    instance, category, angle, lighting = chosen
    name = CLASS_NAMES[category] if 0 <= category < len(CLASS_NAMES) else str(category)
    fixed_name = "elevation" if vary == "azimuth" else "azimuth"
    description = f"{name} {instance}, {fixed_name} {angle}, lighting {lighting}"
    if verbose:
        print(f"Reading the {len(first[chosen])} pairs of {description}")
    angles = {"elevation": angle} if vary == "azimuth" else {"azimuth": angle}
    pairs, found = viewpoint_sequence(
        examples, vary, instance, category, lighting=lighting, image_size=image_size,
        max_examples=max(first[chosen].values()) + 1, verbose=verbose, **angles,
    )
    if found.tolist() != sorted(first[chosen]):
        raise InputError(
            f"the examples came in another order in the second read ({vary} values "
            f"{sorted(first[chosen])} of {description} in the first, {found.tolist()} in the second): "
            "pass a split read in a fixed order (load_split without shuffle_files)"
        )
    return pairs, found, description, category


def evaluate(model_path, data_dir=None, batch_size=20, image_size=None, steps=None, strategy=None,
             download=False, verbose=0):
    """Test loss and accuracy of a saved model on the smallNORB test split (``steps``: the
    first batches only; None: the test pairs ``train`` scored, as it recorded them in
    ``metrics.json`` beside the model (``test_examples``, its ``--validation-steps``
    batches), else all).

    ``image_size`` (None) defaults to the one ``train`` recorded in ``metrics.json`` beside
    the model, else 96: the model takes images of any size, and a model trained on
    resized images was scored on others.

    ``verbose``: 1 shows Keras' progress bars, 2 its one line at the end, on stderr (stdout
    keeps only the result); 0 (the default) is silent. Another value is refused with an
    ``InputError`` before the model is loaded (:func:`applications.checks.verbosity`).
    """
    import os

    verbose = checks.verbosity(verbose)  # ("no" and -1 were taken by Keras' evaluate, after the model was loaded)
    if not os.path.exists(model_path):
        raise PathNotFoundError(f"no model at {model_path!r}: train one first with `keras-capsules train`")
    batch_size = checks.integer_at_least("batch_size", batch_size, 1)
    if image_size is None:
        from applications.checks import recorded_integers

        image_size = recorded_integers(model_path, ("image_size",)).get("image_size", IMAGE_SIZE)
    image_size = checks.integer_at_least("image_size", image_size, 1)
    examples = None
    if steps is not None:
        steps = checks.integer_at_least("steps", steps, 1)
    else:  # the first pairs train scored (its --validation-steps), else all
        examples = checks.recorded_integers(model_path, ("test_examples",), minimum=1).get("test_examples")
    strategy = distribute.resolve_strategy(strategy)
    with strategy.scope():
        model = checks.load_model(model_path)
    # another application's model failed in Keras ("Exception encountered when calling ...")
    pair = (image_size, image_size, 2)
    checks.require_model(
        model, model_path,
        lambda shapes, model: len(shapes) == 1 and checks.image_shape_matches(shapes[0], pair)
        and checks.single_output_shape(model) == (None, NUM_CLASSES),
        "a smallNORB model", "smallnorb",
        f"stereo pairs [batch, {image_size}, {image_size}, 2] in, {NUM_CLASSES} class logits out",
    )
    if not model.compiled:  # saved uncompiled (build_model, then save): Keras' "You must call `compile()`"
        with strategy.scope():
            compile_model(model, total_steps=2)  # the loss and metric; the schedule is not used
    test_examples = load_split("test", data_dir, download)
    if examples is not None:
        test_examples = test_examples.take(examples)
    test_ds = make_dataset(test_examples, False, batch_size, image_size)
    if steps is not None:
        test_ds = test_ds.take(steps)
    with console.progress_on_stderr(verbose):
        loss, accuracy = model.evaluate(test_ds, verbose=verbose)
    return {"test_accuracy": float(accuracy), "test_loss": float(loss), "model": model_path}


# The command-line protocol (applications/registry.py).


def add_arguments(parser, command):
    """smallNORB's options for ``train``, ``evaluate`` and ``tune``."""
    from applications.arguments import non_negative_float, positive_int
    if command == "train":
        parser.set_defaults(epochs=50, batch_size=20)  # the recipe of train() (module docstring)

    parser.add_argument("--data-dir", default=None,
                        help="TFDS data directory holding a prepared smallnorb "
                        "(default: ~/tensorflow_datasets; no download is attempted)")
    parser.add_argument("--image-size", type=positive_int, default=None if command == "evaluate" else IMAGE_SIZE,
                        help="side of the images; below 96 they are resized (default: "
                        + ("the one `train` recorded beside the model, else 96)" if command == "evaluate"
                           else "%(default)s)"))
    parser.add_argument("--validation-steps", type=positive_int, default=None,
                        help="evaluate on the first N test batches only (default: "
                        + ("the test pairs `train` scored, as it recorded them beside the model, else all)"
                           if command == "evaluate" else "all)"))
    if command in ("train", "tune"):
        parser.add_argument("--steps-per-epoch", type=positive_int, default=None,
                            help="training steps per epoch (default: the whole training split)")
    if command == "train":
        parser.add_argument("--mixup-alpha", type=non_negative_float, default=0.2,
                            help="Beta parameter of mixup; 0 disables mixup (default: %(default)s)")
        parser.add_argument("--channels", type=positive_int, default=64, help="channels of the convolutions")
        parser.add_argument("--parts", type=positive_int, default=64,
                            help="part capsules per location and hidden capsules")


def _require_data(data_dir):
    # before the run directory is made (run_train) or the model loaded (run_evaluate);
    # load_split raises the same error for the Python API
    tfds_data.require_prepared("smallnorb", data_dir)


def run_train(args, strategy):
    import os

    from applications import fault_tolerance
    from applications.arguments import run_options
    from applications.demo import plot_history

    _require_data(args.data_dir)
    out = distribute.output_dir(args.run_dir, strategy)
    with user_path(f"cannot create the run directory {out!r}"):
        os.makedirs(out, exist_ok=True)
    resumable = fault_tolerance.resumable_callbacks(out, save_freq=args.save_freq, run_options=run_options(args),
                                                    epochs=args.epochs)
    model, history = train(
        data_dir=args.data_dir,
        run_dir=out,
        epochs=args.epochs,
        batch_size=distribute.global_batch_size(args.batch_size, strategy),
        image_size=args.image_size,
        steps_per_epoch=args.steps_per_epoch,
        validation_steps=args.validation_steps,
        mixup_alpha=args.mixup_alpha or None,
        seed=args.seed,
        verbose=0 if args.quiet else 1,
        download=False,
        model_kwargs={"d_chns": args.channels, "n_parts": args.parts},
        strategy=strategy,
        callbacks=resumable,
    )
    paths = {
        "model": os.path.join(out, "model.keras"),
        "plot": os.path.join(out, "history.png"),
        "history": os.path.join(out, fault_tolerance.HISTORY_CSV),
        "metrics": os.path.join(out, "metrics.json"),
        "logs": os.path.join(out, "logs"),
    }
    fault_tolerance.save_model_atomically(model, paths["model"])
    # Curves of every epoch, also those before a resume (the CSV log spans them all).
    # A rerun that finishes a run from a backup of all its epochs trains nothing, so
    # this fit's history is empty: the figures are the log's (every epoch of the run).
    logs = fault_tolerance.logged_history(history, resumable)[0]
    plot_history(logs, paths["plot"], held_out="test")  # (fit watches the test pairs, as the paper's runs)
    # the "reverse graphics" view: the pose of a test object's class capsule as it turns round.
    # The images stay encoded while the labels are scanned: only the sequence's pairs are decoded.
    pairs, azimuths, name, category = longest_viewpoint_sequence(
        load_split("test", args.data_dir, download=False, decode_images=False), image_size=args.image_size,
        verbose=0 if args.quiet else 1,
    )
    if len(pairs) >= 3:  # fewer points make no trajectory (and metric MDS needs 3)
        paths["pose_trajectory"] = os.path.join(out, "pose_trajectory.png")
        # The capsule of the object's true class in every view: the highest-scoring capsule of
        # each view mixed the poses of different capsules wherever a view was misclassified.
        capsule = CLASS_NAMES[category] if 0 <= category < len(CLASS_NAMES) else str(category)
        plot_pose_trajectory(model, pairs, paths["pose_trajectory"], labels=azimuths, class_index=category,
                             title=f"pose of the {capsule!r} class capsule (the true class, MDS)\n"
                                   f"along the azimuth of test object {name}")
    result = {
        "test_accuracy": float(logs["val_accuracy"][-1]) if logs.get("val_accuracy") else None,
        "test_loss": float(logs["val_loss"][-1]) if logs.get("val_loss") else None,
        "parameters": int(model.count_params()),
        "epochs": args.epochs,
        "image_size": args.image_size,  # evaluate scores images of this size by default
        # the test pairs fit scored (None: all): evaluate scores as many by default
        "test_examples": scored_test_examples(args.validation_steps,
                                              distribute.global_batch_size(args.batch_size, strategy)),
        "resumed_from_epoch": resumable[0].restored_epoch,
        **paths,
    }
    if result["test_accuracy"] is None:
        del result["test_accuracy"]
    fault_tolerance.write_metrics_json(result, paths["metrics"])
    fault_tolerance.finish_run(resumable)  # the outputs are written: the backup goes
    return result


def run_evaluate(args, strategy):
    _require_data(args.data_dir)
    return evaluate(args.model, data_dir=args.data_dir,
                    batch_size=distribute.global_batch_size(args.batch_size, strategy),
                    image_size=args.image_size, steps=args.validation_steps, strategy=strategy,
                    verbose=0 if args.quiet else 1)


def main(argv=None):
    import argparse

    from applications.arguments import positive_int

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--run-dir", default="runs/smallnorb")
    parser.add_argument("--epochs", type=positive_int, default=50)
    parser.add_argument("--count-only", action="store_true", help="print the parameter count")
    args = parser.parse_args(argv)
    if args.count_only:
        counts = parameter_counts(build_model())
        print(f"smallNORB model at {IMAGE_SIZE}x{IMAGE_SIZE}: {counts}")
        return counts
    train(data_dir=args.data_dir, run_dir=args.run_dir, epochs=args.epochs)


if __name__ == "__main__":
    main()


__all__ = [
    "CoordinateChannels",
    "build_model",
    "check_model_arguments",
    "parameter_counts",
    "compile_model",
    "load_split",
    "stereo_pair",
    "make_dataset",
    "train",
    "class_capsule_poses",
    "plot_pose_trajectory",
    "longest_viewpoint_sequence",
    "viewpoint_sequence",
]
