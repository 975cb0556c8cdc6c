"""Sort-of-CLEVR with a symbolic knowledge base, answered by a MAC network.

Sort-of-CLEVR (Santoro et al. 2017) scenes hold six objects, one of each colour,
each a square or a circle at a random position. Questions ask about one object
(its shape; whether it is on the left; whether it is on the top) or about its
relation to the others (the shape of the closest or the farthest object; how many
objects share its shape; and a two-hop question, the shape of the object nearest
to the object farthest from the one asked about). Questions are word tokens.

Two knowledge bases:

* symbolic (``kb="symbolic"``): the list of objects, one cell per object (colour
  one-hot, shape one-hot, x, y), so the task isolates the reasoning;
* image (``kb="image"``): the scene drawn on a 75x75 canvas (:func:`render_scene`,
  numpy only: filled squares and circles of 11 pixels on white), turned into a
  knowledge base of ``5 x 5`` cells by a small convolutional stem (four stride-2
  3x3 convolutions with batch normalization and ReLU) followed by the CLEVR
  knowledge-base unit (:func:`applications.clevr.image_knowledge_base`: positional
  encoding and two 3x3 ELU convolutions). Scenes drawn as images keep objects at
  least ``IMAGE_MIN_DISTANCE`` apart so that none hides another, carry the positions
  they are drawn at (the ``"both"`` knowledge base too), and ask no relational
  question whose two closest distances differ by less than a pixel
  (``IMAGE_MIN_DISTANCE_GAP``), so that the image settles every answer.

Data: :func:`generate_examples` (numpy, for a fixed set) and :func:`make_dataset`
(an endless ``tf.data`` stream generated on the fly from a seed; it can start at
any batch, so that a resumed run goes on with the examples it would have seen).

Model: :func:`build_model`, the MAC architecture of Hudson & Manning 2018 from the
parts in :mod:`applications.clevr`: the input unit (word embeddings and a BiLSTM:
contextual words and question vector), a :class:`keras_capsules.layers.MACNetwork`
(layer ``"mac"``) over the knowledge base, and a two-layer classifier on
``[m_p, q]``. :func:`plot_example_attention` draws its attention maps.
"""

import json
import numbers

import numpy as np
import keras
import tensorflow as tf
from keras import ops

from applications import arguments, checks, clevr, console, distribute
from applications.checks import integer_at_least
from applications.errors import InputError, PathNotFoundError, check_run_dir, create_run_dir, leaves_no_empty_run_dir

COLORS = ("red", "green", "blue", "orange", "gray", "yellow")
SHAPES = ("square", "circle")
ANSWERS = ("yes", "no", "square", "circle", "1", "2", "3", "4", "5", "6")

#: Question templates; ``{}`` is the colour of the object asked about.
TEMPLATES = (
    "what is the shape of the {} object ?",
    "is the {} object on the left ?",
    "is the {} object on the top ?",
    "what is the shape of the object closest to the {} object ?",
    "what is the shape of the object farthest from the {} object ?",
    "how many objects have the same shape as the {} object ?",
    "what is the shape of the object nearest to the object farthest from the {} object ?",
)
#: Indices of the relational templates (the others are non-relational).
RELATIONAL = (3, 4, 5, 6)
#: The two-hop template.
TWO_HOP = 6

PAD = "<pad>"
VOCAB = (PAD,) + tuple(
    sorted({w for t in TEMPLATES for w in t.format("").split()} | set(COLORS))
)
WORD_INDEX = {w: i for i, w in enumerate(VOCAB)}
MAX_QUESTION_LENGTH = max(len(t.format("x").split()) for t in TEMPLATES)
NUM_OBJECTS = len(COLORS)
KB_DIM = len(COLORS) + len(SHAPES) + 2
IMAGE_SIZE = 75
OBJECT_SIZE = 11  # pixels across a square or a circle
IMAGE_MIN_DISTANCE = 0.25  # between the centres of objects drawn in an image (no overlap)
#: RGB of COLORS in [0, 1].
RGB = np.array(
    [[1.0, 0.0, 0.0], [0.0, 0.7, 0.0], [0.0, 0.0, 1.0], [1.0, 0.55, 0.0], [0.5, 0.5, 0.5], [0.95, 0.9, 0.0]],
    "float32",
)
KB_KINDS = ("symbolic", "image", "both")
#: The sizes of :func:`build_model` that the generated data set (its words, answers and
#: object features): :func:`train` builds its model with them and refuses them in
#: ``model_kwargs`` (``kb_dim=5`` failed inside ``fit``, ``num_answers=5`` there too on
#: answer 6, and ``num_answers=12`` trained a model that :func:`evaluate` refuses).
DATA_SIZES = {"vocabulary_size": len(VOCAB), "num_answers": len(ANSWERS), "kb_dim": KB_DIM}
#: Draws of one object's position before :func:`random_scene` gives up.
MAX_PLACEMENT_DRAWS = 10000
#: Image scenes: the least difference, in pixels of the drawn image, between the two
#: distances a relational question turns on (nearest or farthest object). Closer calls
#: are redrawn: the image cannot show them (a distance is known to about a pixel), and
#: ties on the pixel grid have no answer at all.
IMAGE_MIN_DISTANCE_GAP = 1.0


def tokenize(text, length=MAX_QUESTION_LENGTH):
    """Token ids of a question, padded with 0 (``<pad>``) to ``length``."""
    unknown = [w for w in text.split() if w not in WORD_INDEX]
    if unknown:
        raise InputError(f"Question with words not in VOCAB: {unknown}. Received: text={text!r}")
    ids = [WORD_INDEX[w] for w in text.split()]
    if len(ids) > length:
        raise InputError(f"Question longer than length={length}. Received: text={text!r}")
    return np.array(ids + [0] * (length - len(ids)), "int32")


def detokenize(ids):
    """The words of the token ids ``ids`` (indices into ``VOCAB``), padding (0) left out.

    Raises:
        InputError (a ValueError): an id that is no index into ``VOCAB`` (-1 was Python's
            last word, 'yellow'; one past the end an IndexError).
    """
    array = np.asarray(ids)
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise InputError(f"`ids` must be integer token ids. Received: ids of dtype {array.dtype}")
    ids = [int(i) for i in array.reshape(-1)]
    bad = [i for i in ids if not 0 <= i < len(VOCAB)]
    if bad:
        raise InputError(f"`ids` must be token ids in [0, {len(VOCAB) - 1}]. Received: {bad[0]} in ids")
    return " ".join(VOCAB[i] for i in ids if i != 0)


def random_scene(rng, min_distance=0.0):
    """A scene: ``shapes`` ``[6]`` (0 square, 1 circle) and ``positions`` ``[6, 2]``
    (x to the right, y downwards, in [0, 1]); object ``k`` has colour ``COLORS[k]``.

    With ``min_distance > 0`` positions are redrawn until every pair of objects is at
    least that far apart (use at most ~0.3: six such points must fit in the square).
    An object that still has no place after ``MAX_PLACEMENT_DRAWS`` draws raises a
    ``ValueError`` (``min_distance`` too large) instead of looping for ever.
    """
    if isinstance(min_distance, bool) or not isinstance(min_distance, numbers.Real) or not np.isfinite(min_distance):
        raise InputError(f"`min_distance` must be a finite number. Received: min_distance={min_distance!r}")
    shapes = rng.integers(0, len(SHAPES), NUM_OBJECTS)
    positions = rng.uniform(0.0, 1.0, (NUM_OBJECTS, 2))
    if min_distance > 0:
        for k in range(1, NUM_OBJECTS):
            draws = 0
            while np.min(np.linalg.norm(positions[:k] - positions[k], axis=-1)) < min_distance:
                draws += 1
                if draws > MAX_PLACEMENT_DRAWS:
                    raise InputError(
                        f"Could not place {NUM_OBJECTS} objects at least min_distance apart in the unit "
                        f"square (use at most ~0.3). Received: min_distance={min_distance!r}"
                    )
                positions[k] = rng.uniform(0.0, 1.0, 2)
    return {"shapes": shapes, "positions": positions}


def pixel_centres(positions, size=IMAGE_SIZE, object_size=OBJECT_SIZE):
    """Pixel (column, row) of the centres of objects at ``positions`` in [0, 1].

    A coordinate below 0.5 lands left of (above) the canvas's middle, one of 0.5 or
    more right of (below) it, never on the middle column (row) itself, so that the
    image shows what :func:`answer` says about "on the left" and "on the top".
    """
    positions = np.asarray(positions)
    margin = object_size // 2 + 1
    centres = np.round(margin + positions * (size - 1 - 2 * margin)).astype(int)
    # the middle column of an odd canvas is in neither half: objects at x in [0.492, 0.508)
    # were drawn there, whether answer() called them on the left or not
    middle = (size - 1) / 2
    return np.where(
        positions < 0.5, np.minimum(centres, int(np.ceil(middle)) - 1), np.maximum(centres, int(np.floor(middle)) + 1)
    )


def drawn_positions(positions, size=IMAGE_SIZE, object_size=OBJECT_SIZE):
    """The positions in [0, 1] of the pixel centres where :func:`render_scene` draws
    objects at ``positions``: :func:`pixel_centres` mapped back. Image scenes carry these
    (also in the ``"both"`` knowledge base), so that their answers are those of the image."""
    margin = object_size // 2 + 1
    return (pixel_centres(positions, size, object_size) - margin) / (size - 1 - 2 * margin)


def _image_settles(positions, template, color, gap=IMAGE_MIN_DISTANCE_GAP):
    """Whether the scene drawn from ``positions`` keeps its objects
    ``IMAGE_MIN_DISTANCE`` apart (as drawn, not only as drawn from) and, for a
    relational question ``template`` about ``color``, the distances it turns on differ
    by at least ``gap`` pixels in the image."""
    drawn = drawn_positions(positions)
    distances = np.linalg.norm(drawn[:, None] - drawn[None], axis=-1)
    if np.min(distances + 2 * np.eye(len(drawn))) < IMAGE_MIN_DISTANCE:
        return False
    pixels = distances * (IMAGE_SIZE - 1 - 2 * (OBJECT_SIZE // 2 + 1))

    def clear(frm, nearest):
        others = np.sort(np.delete(pixels[frm], frm))
        return (others[1] - others[0] if nearest else others[-1] - others[-2]) >= gap

    if template == 3:
        return clear(color, nearest=True)
    if template == 4:
        return clear(color, nearest=False)
    if template == TWO_HOP:
        return clear(color, nearest=False) and clear(int(np.argmax(pixels[color])), nearest=True)
    return True


def render_scene(scene, size=IMAGE_SIZE, object_size=OBJECT_SIZE):
    """The scene drawn as an RGB image ``float32 [size, size, 3]`` in [0, 1].

    White background; object ``k`` is a filled square or circle of ``object_size``
    pixels in colour ``RGB[k]``, centred at :func:`pixel_centres` (so "left" means a
    centre in the left half of the canvas, as in :func:`answer`).
    """
    image = np.ones((size, size, 3), "float32")
    rows, cols = np.mgrid[0:size, 0:size]
    half = object_size / 2.0
    for k, ((cx, cy), shape) in enumerate(zip(pixel_centres(scene["positions"], size, object_size), scene["shapes"])):
        if SHAPES[shape] == "square":
            inside = (np.abs(cols - cx) < half) & (np.abs(rows - cy) < half)
        else:
            inside = (cols - cx) ** 2 + (rows - cy) ** 2 < half**2
        image[inside] = RGB[k]
    return image


def scene_kb(scene):
    """The knowledge base ``[6, KB_DIM]``: colour one-hot, shape one-hot, x, y."""
    colors = np.eye(NUM_OBJECTS)
    shapes = np.eye(len(SHAPES))[scene["shapes"]]
    return np.concatenate([colors, shapes, scene["positions"]], -1).astype("float32")


def answer(scene, template, color):
    """The answer index (into ``ANSWERS``) of question ``template`` about ``color``."""
    if isinstance(color, bool) or not isinstance(color, numbers.Integral) or not 0 <= color < NUM_OBJECTS:
        raise InputError(f"`color` must be an integer in [0, {NUM_OBJECTS}). Received: color={color!r}")
    shapes, pos = scene["shapes"], scene["positions"]
    yes, no = ANSWERS.index("yes"), ANSWERS.index("no")
    shape_answer = [ANSWERS.index(s) for s in SHAPES]
    if template == 0:
        return shape_answer[shapes[color]]
    if template == 1:
        return yes if pos[color, 0] < 0.5 else no
    if template == 2:
        return yes if pos[color, 1] < 0.5 else no
    if template in (3, 4):
        dist = np.linalg.norm(pos - pos[color], axis=-1)
        if template == 3:
            dist[color] = np.inf
            return shape_answer[shapes[np.argmin(dist)]]
        return shape_answer[shapes[np.argmax(dist)]]
    if template == 5:
        return ANSWERS.index(str(int(np.sum(shapes == shapes[color]))))
    if template == TWO_HOP:
        farthest = int(np.argmax(np.linalg.norm(pos - pos[color], axis=-1)))
        dist = np.linalg.norm(pos - pos[farthest], axis=-1)
        dist[farthest] = np.inf
        return shape_answer[shapes[np.argmin(dist)]]
    raise InputError(f"`template` must be in [0, {len(TEMPLATES)}). Received: template={template}")


def _check_kb(kb):
    if kb not in KB_KINDS:
        raise InputError(f"`kb` must be one of {KB_KINDS}. Received: kb={kb!r}")


def _draw(rng, templates, kb):
    """The random draws of one example: ``(scene, template, colour)``.

    An image scene (``kb`` ``"image"`` or ``"both"``) carries the positions it is drawn
    at (:func:`drawn_positions`), and an example whose relational question the image
    cannot settle (:data:`IMAGE_MIN_DISTANCE_GAP`), or whose objects are closer than
    ``IMAGE_MIN_DISTANCE`` as drawn, is drawn again: before, about 1 in 100
    relational questions of image scenes had the answer of positions between the
    pixels, other than what the image shows, or one of two tied objects.
    """
    while True:
        scene = random_scene(rng, IMAGE_MIN_DISTANCE if kb != "symbolic" else 0.0)
        template, color = int(rng.choice(templates)), int(rng.integers(0, NUM_OBJECTS))
        if kb == "symbolic":
            return scene, template, color
        if _image_settles(scene["positions"], template, color):
            return {**scene, "positions": drawn_positions(scene["positions"])}, template, color


def _example(rng, templates, kb="symbolic"):
    scene, template, color = _draw(rng, templates, kb)
    x = {"question": tokenize(TEMPLATES[template].format(COLORS[color]))}
    if kb != "image":
        x["kb"] = scene_kb(scene)
    if kb != "symbolic":
        x["image"] = render_scene(scene)
    return x, answer(scene, template, color)


def _templates(relational):
    if relational is None:
        return np.arange(len(TEMPLATES))
    if relational is True:
        return np.array(RELATIONAL)
    if relational is False:
        return np.array([t for t in range(len(TEMPLATES)) if t not in RELATIONAL])
    raise InputError(f"`relational` must be None, True or False. Received: relational={relational!r}")


def _check_templates(templates, relational):
    """The template indices to draw from: ``templates`` if given (checked), else by ``relational``."""
    if templates is None:
        return _templates(relational)
    indices = np.asarray(templates)
    if (
        indices.ndim != 1
        or indices.size == 0
        or not np.issubdtype(indices.dtype, np.integer)
        or np.any((indices < 0) | (indices >= len(TEMPLATES)))
    ):
        raise InputError(
            f"`templates` must be a non-empty list of template indices in [0, {len(TEMPLATES)}). "
            f"Received: templates={templates!r}"
        )
    return indices


def _shapes(kb):
    shapes = {"question": (MAX_QUESTION_LENGTH,)}
    if kb != "image":
        shapes["kb"] = (NUM_OBJECTS, KB_DIM)
    if kb != "symbolic":
        shapes["image"] = (IMAGE_SIZE, IMAGE_SIZE, 3)
    return shapes


def generate_examples(num_examples, seed=0, relational=None, kb="symbolic", templates=None):
    """``num_examples`` examples as numpy arrays.

    Args:
        num_examples: how many.
        seed: seed of the scenes and questions: None, a non-negative integer or a
            sequence of them (else an ``InputError``).
        relational: None for all question types, True for the relational ones only,
            False for the non-relational ones only.
        kb: ``"symbolic"`` (object list, key ``"kb"``), ``"image"`` (rendered scene,
            key ``"image"``) or ``"both"``. Image scenes keep objects apart
            (``IMAGE_MIN_DISTANCE``), lie on the drawn pixel grid and ask only
            questions the image settles (:func:`_draw`), so the same seed gives other scenes than with
            ``"symbolic"``.
        templates: optional list of template indices (overrides ``relational``).

    Returns:
        ``({"question": int32 [n, MAX_QUESTION_LENGTH], "kb": float32 [n, 6, KB_DIM]
        and/or "image": float32 [n, 75, 75, 3]}, answers int32 [n])``.
    """
    _check_kb(kb)
    num_examples = integer_at_least("num_examples", num_examples, 0)
    rng = np.random.default_rng(checks.numpy_seed(seed))
    templates = _check_templates(templates, relational)
    examples = [_example(rng, templates, kb) for _ in range(num_examples)]
    xs = {
        key: np.stack([x[key] for x, _ in examples]).reshape((-1,) + shape)
        if examples else np.zeros((0,) + shape)
        for key, shape in _shapes(kb).items()
    }
    xs = {k: v.astype("int32" if k == "question" else "float32") for k, v in xs.items()}
    return xs, np.array([a for _, a in examples], "int32")


def make_dataset(batch_size=64, seed=0, relational=None, kb="symbolic", templates=None, start=0):
    """An endless ``tf.data.Dataset`` of batches generated on the fly.

    Elements are ``({"question": [batch, MAX_QUESTION_LENGTH] int32,
    "kb": [batch, 6, KB_DIM] float32 and/or "image": [batch, 75, 75, 3] float32},
    answers [batch] int32)`` (``kb`` as in :func:`generate_examples`); the same seed
    gives the same stream: the examples of :func:`generate_examples` with that seed,
    cut into batches. A ``seed`` that :func:`generate_examples` refuses is refused here,
    when the stream is made.

    ``start`` (default 0) starts the stream at its batch ``start``: the batches that
    the stream with ``start=0`` yields after its first ``start``, so that a run
    resumed after ``start`` steps trains on the examples an uninterrupted run would
    have trained on. The skipped examples' random draws are replayed (not turned into
    examples), which takes about two thirds of the time of generating symbolic
    examples and a third of that of image ones.
    """
    _check_kb(kb)
    templates = _check_templates(templates, relational)
    checks.numpy_seed(seed)  # here, not when the stream is read

    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise InputError(f"`batch_size` must be a positive integer. Received: batch_size={batch_size!r}")
    start = integer_at_least("start", start, 0)
    shapes = _shapes(kb)

    keys = tuple(shapes)
    dtypes = tuple(tf.int32 if key == "question" else tf.float32 for key in keys)

    def next_batch(state):
        # Whole batches from Python: one tf.data element per batch, not per example
        # (per-element overhead was two fifths of a MAC training step). The examples
        # and their order are those of a per-example stream batched. `state` is the
        # generator's after the batches before (JSON of its bit generator's state),
        # empty for the first batch: the seed's, with the skipped batches' draws replayed.
        if state:
            rng = np.random.Generator(np.random.PCG64())
            rng.bit_generator.state = json.loads(state)
        else:
            rng = np.random.default_rng(seed)
            for _ in range(start * batch_size):
                _draw(rng, templates, kb)
        examples = [_example(rng, templates, kb) for _ in range(batch_size)]
        xs = [np.stack([e[key] for e, _ in examples]).astype(dtype.as_numpy_dtype) for key, dtype in zip(keys, dtypes)]
        return (json.dumps(rng.bit_generator.state).encode(), *xs, np.array([a for _, a in examples], "int32"))

    def step(state, _):
        state, *xs, answers = tf.numpy_function(next_batch, [state], [tf.string, *dtypes, tf.int32])
        state.set_shape(())
        for x, key in zip(xs, keys):
            x.set_shape((batch_size,) + shapes[key])
        answers.set_shape((batch_size,))
        return state, (dict(zip(keys, xs)), answers)

    # The generator's state is the scan's, a tensor: every iterator starts from the seed,
    # and no Python generator is left to finalize. (A `from_generator` stream's iterator,
    # alive until the interpreter's exit, ended `train` with TensorFlow's "Error occurred
    # when finalizing GeneratorDataset iterator" on stderr.)
    ds = tf.data.Dataset.from_tensors(0).repeat().scan(tf.constant(b""), step)
    return distribute.prefetched(ds)


@keras.saving.register_keras_serializable(package="applications")
class CoordinateEncoding(keras.layers.Layer):
    """Appends sines and cosines of an object list's coordinates to its features.

    The sin/cos positional scheme of the MAC paper's image knowledge base, applied to
    objects at continuous positions: for each of the last ``coordinates`` features
    ``p`` (a position in [0, 1]) and each frequency ``w_k = base_frequency * 2**k``,
    ``k < num_frequencies``, it appends ``sin(w_k p)`` and ``cos(w_k p)``, scaled by
    ``1 / sqrt(num_frequencies)`` so that each coordinate's channels have unit norm,
    like a one-hot feature (unscaled, they outweigh the colour and shape features in
    the projection at initialisation, and attending by colour is learned slower).

    Why: the read unit scores a cell with a bilinear form of the memory and the cell,
    so on raw coordinates a score is linear in the position and "the object nearest
    to the one in memory" cannot be expressed. With these channels,
    ``cos(w (p - q)) = cos(w p) cos(w q) + sin(w p) sin(w q)`` is such a bilinear form
    between an object's channels and those of the object held in memory: a smooth
    similarity of positions that peaks where ``p = q``. The lowest frequency
    (``pi / 2`` by default) keeps it monotone in ``|p - q|`` over the whole [0, 1]
    range, the higher ones sharpen it.

    Args:
        num_frequencies: frequencies per coordinate (positive int). Default 4.
        base_frequency: the lowest frequency ``w_0`` (radians per unit). Default
            ``pi / 2``.
        coordinates: how many trailing features are coordinates. Default 2 (x, y).

    Call arguments:
        objects: ``[batch, objects, features]`` whose last ``coordinates`` features
            are positions.

    Returns:
        ``[batch, objects, features + 2 * coordinates * num_frequencies]``.
    """

    def __init__(self, num_frequencies=4, base_frequency=float(np.pi / 2), coordinates=2, **kwargs):
        super().__init__(**kwargs)
        for arg, value in (("num_frequencies", num_frequencies), ("coordinates", coordinates)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise InputError(f"`{arg}` must be a positive integer. Received: {arg}={value!r}")
        if isinstance(base_frequency, bool) or not isinstance(base_frequency, numbers.Real) or not (
            np.isfinite(base_frequency) and base_frequency > 0
        ):
            raise InputError(
                f"`base_frequency` must be a positive finite number. Received: base_frequency={base_frequency!r}"
            )
        self.num_frequencies = int(num_frequencies)
        self.base_frequency = float(base_frequency)
        self.coordinates = int(coordinates)

    def _check(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError(
                f"CoordinateEncoding expects objects of shape [batch, objects, features]. "
                f"Received: shape={tuple(input_shape)}"
            )
        if input_shape[-1] is not None and input_shape[-1] < self.coordinates:
            raise ValueError(
                f"CoordinateEncoding with coordinates={self.coordinates} needs at least that many "
                f"features. Received: shape={tuple(input_shape)}"
            )

    def build(self, input_shape):
        self._check(input_shape)
        self.built = True

    def call(self, objects):
        positions = objects[..., -self.coordinates:]
        angles = ops.concatenate(
            [positions * (self.base_frequency * 2.0**k) for k in range(self.num_frequencies)], axis=-1
        )
        scale = ops.cast(1.0 / np.sqrt(self.num_frequencies), objects.dtype)
        return ops.concatenate([objects, scale * ops.sin(angles), scale * ops.cos(angles)], axis=-1)

    def compute_output_shape(self, input_shape):
        self._check(input_shape)
        extra = 2 * self.coordinates * self.num_frequencies
        return tuple(input_shape[:-1]) + (None if input_shape[-1] is None else input_shape[-1] + extra,)

    def get_config(self):
        return {
            **super().get_config(),
            "num_frequencies": self.num_frequencies,
            "base_frequency": self.base_frequency,
            "coordinates": self.coordinates,
        }


def image_stem(images, filters=24, name="stem"):
    """Four stride-2 3x3 convolutions with batch normalization and ReLU: 75x75 -> 5x5."""
    x = images
    for k in range(4):
        x = keras.layers.Conv2D(filters, 3, strides=2, padding="same", name=f"{name}_conv{k + 1}")(x)
        x = keras.layers.BatchNormalization(name=f"{name}_bn{k + 1}")(x)
        x = keras.layers.Activation("relu", name=f"{name}_relu{k + 1}")(x)
    return x


def build_model(
    units=128,
    max_steps=4,
    embedding_dim=64,
    vocabulary_size=len(VOCAB),
    num_answers=len(ANSWERS),
    kb_dim=KB_DIM,
    kb="symbolic",
    stem_filters=24,
    positional_encoding="linear",
    coordinate_frequencies=4,
    self_attention=False,
    memory_gate=False,
    memory_dropout=0.0,
    output_dropout=0.0,
    name="sort_of_clevr_mac",
):
    """The MAC model for Sort-of-CLEVR with a symbolic or an image knowledge base.

    Args:
        units: the MAC dimension ``d`` (memory, control, contextual words; even).
        max_steps: reasoning steps ``p``.
        embedding_dim: word-embedding size.
        vocabulary_size, num_answers, kb_dim: the task's sizes (defaults: this module's).
            ``kb_dim``, the features of an object of the symbolic knowledge base, is an
            integer >= 1, >= 2 with ``coordinate_frequencies`` (its last two features
            are the object's x and y, which :class:`CoordinateEncoding` encodes).
        kb: ``"symbolic"`` (a Dense projection of the object list) or ``"image"`` (the
            convolutional stem and :func:`applications.clevr.image_knowledge_base`).
        stem_filters: channels of the image stem.
        positional_encoding: of the image knowledge base (``"linear"``, ``"sincos"``
            or None).
        coordinate_frequencies: symbolic knowledge base: sin/cos frequencies per
            coordinate appended to every object (:class:`CoordinateEncoding`), so the
            read unit can attend by distance; 0 projects the raw object features.
            ``stem_filters`` and ``positional_encoding`` shape the image knowledge
            base only, ``coordinate_frequencies`` and ``kb_dim`` the symbolic one
            only: a value other than the default for the other ``kb`` has no effect
            and warns (``UserWarning``).
        self_attention, memory_gate, memory_dropout: passed to ``MACNetwork``.
        output_dropout: dropout before the classifier's hidden layer.
        name: model name.

    Returns:
        A ``keras.Model`` with inputs ``{"question": int [batch, length] (0 = padding),
        "kb": float [batch, objects, kb_dim]}`` (symbolic) or ``{"question", "image":
        float [batch, 75, 75, 3]}`` (image), and answer logits ``[batch, num_answers]``.
        Its layer ``"mac"`` also returns the attention maps (:func:`plot_example_attention`).
    """
    if kb not in ("symbolic", "image"):
        raise InputError(f"`kb` must be 'symbolic' or 'image'. Received: kb={kb!r}")
    if isinstance(coordinate_frequencies, bool) or not isinstance(coordinate_frequencies, (int, np.integer)) \
            or coordinate_frequencies < 0:
        raise InputError(
            f"`coordinate_frequencies` must be a non-negative integer. "
            f"Received: coordinate_frequencies={coordinate_frequencies!r}"
        )
    # a numpy integer built the BiLSTM, then was refused by the symbolic knowledge base's Dense
    # ("Received an invalid value for `units`, expected a positive integer. Received: units=8")
    units = clevr.mac_units(units)
    # a smaller vocabulary built, then failed on this task's questions with a raw gather
    # error (their token ids go up to len(VOCAB) - 1); one answer was a softmax always 1
    vocabulary_size = integer_at_least("vocabulary_size", vocabulary_size, len(VOCAB))
    num_answers = integer_at_least("num_answers", num_answers, 2)
    # kb_dim=0 failed in CoordinateEncoding's shape check (about `coordinates`), -1 with a raw
    # shape error; stem_filters=True built one channel per convolution
    kb_dim = integer_at_least("kb_dim", kb_dim, 2 if kb == "symbolic" and coordinate_frequencies else 1)
    stem_filters = integer_at_least("stem_filters", stem_filters, 1)
    # the other knowledge base's options were silently without effect
    unused = ((("stem_filters", stem_filters, 24), ("positional_encoding", positional_encoding, "linear"))
              if kb == "symbolic" else (("coordinate_frequencies", coordinate_frequencies, 4),
                                        ("kb_dim", kb_dim, KB_DIM)))
    for option, value, default in unused:
        if value != default:
            checks.warn_without_effect("sort_of_clevr.build_model", option, value,
                                       "kb='image'" if kb == "symbolic" else "kb='symbolic'")
    tokens = keras.Input((None,), dtype="int32", name="question")
    words, question = clevr.input_unit(tokens, vocabulary_size, embedding_dim, units)
    if kb == "symbolic":
        kb_in = keras.Input((None, kb_dim), name="kb")
        objects = kb_in
        if coordinate_frequencies:
            objects = CoordinateEncoding(coordinate_frequencies, name="kb_coordinates")(objects)
        knowledge = keras.layers.Dense(units, name="kb_projection")(objects)
    else:
        kb_in = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3), name="image")
        knowledge = clevr.image_knowledge_base(
            image_stem(kb_in, stem_filters), units, positional_encoding, encoding_dim=16
        )
    logits = clevr.mac_answer_logits(
        words, question, knowledge, num_answers, max_steps, output_dropout=output_dropout,
        self_attention=self_attention, memory_gate=memory_gate, memory_dropout=memory_dropout,
    )
    return keras.Model({"question": tokens, kb_in.name: kb_in}, logits, name=name)


def plot_example_attention(model, x, path, index=0):
    """Draws the attention maps of example ``index`` of the batch ``x`` to a PNG.

    Word attention per step; knowledge-base attention as bars over the objects
    (symbolic) or as a heat map over the image (image knowledge base). ``x`` holds
    at least the model's inputs (a batch of ``kb="both"`` serves either model).
    ``index`` may be negative (counted from the end, as in Python).
    """
    n = len(x["question"])
    if isinstance(index, bool) or not isinstance(index, numbers.Integral) or not -n <= index < n:
        raise InputError(f"`index` must be an integer in [-{n}, {n}) for a batch of {n}. Received: index={index!r}")
    index = int(index) % n
    # only the model's inputs: a batch of kb="both" gave a symbolic model its image too
    # (a Keras input-shape error) and drew its object attention as a grid
    names = list(model.input) if isinstance(model.input, dict) else [t.name for t in keras.tree.flatten(model.input)]
    missing = [name for name in names if name not in x]
    if missing:
        raise InputError(f"`x` must hold the model's inputs {names}. Received: x with keys {sorted(x)}")
    out = clevr.attention_model(model)({name: x[name][index : index + 1] for name in names})
    words = [VOCAB[i] for i in np.asarray(x["question"][index]) if i != 0]
    predicted = ANSWERS[int(np.argmax(out["answer"][0]))]
    read = keras.ops.convert_to_numpy(out["read_attention"][0])
    kwargs = {"object_names": COLORS}
    if "image" in names:
        side = int(round(np.sqrt(read.shape[-1])))
        kwargs = {"grid": (side, side), "image": np.asarray(x["image"][index])}
    return clevr.plot_attention(
        path, words, keras.ops.convert_to_numpy(out["control_attention"][0]), read,
        title=f"{' '.join(words)} -> {predicted}", **kwargs,
    )


@leaves_no_empty_run_dir()
@arguments.trains_under_precision
def train(run_dir="runs/sort_of_clevr", steps=20000, batch_size=64, kb="symbolic", learning_rate=1e-4,
          validation_examples=2000, model_kwargs=None, seed=0, verbose=1, epochs=10, strategy=None,
          callbacks=(), statistics_steps=100, precision=None):
    """Trains MAC on generated Sort-of-CLEVR with the paper's recipe (as the demo does).

    Writes ``model.keras`` (EMA weights; with an image knowledge base, the stem's
    batch-normalization statistics re-estimated for them on the training stream's first
    ``statistics_steps`` batches, 100 by default, at every swap to the EMA weights:
    ``clevr.recipe_callbacks``), ``history.png``, ``metrics.json``,
    ``attention.png`` and TensorBoard logs to ``run_dir``. Returns the metrics with
    the relational and non-relational validation accuracies. ``steps`` are spread over
    ``epochs`` epochs, and exactly ``steps`` are trained: ``steps // epochs`` each, one
    more in each of the first ``steps % epochs`` epochs (with fewer steps than epochs,
    one step in each of ``steps`` epochs); with ``strategy`` the model is built and
    compiled in its scope and ``batch_size`` is the global batch; ``callbacks`` run
    after the recipe's. With a ``fault_tolerance.AtomicBackupAndRestore`` among
    them, a run resumed from its backup at epoch ``k`` trains on the training
    stream's batches from those of epoch ``k`` on, as an uninterrupted run does
    (:func:`make_dataset` ``start``), and the backup is deleted once the outputs are
    written (``fault_tolerance.finish_run``). ``model_kwargs`` holds :func:`build_model`'s
    options but ``kb`` (train's own) and the sizes the generated data set
    (``vocabulary_size``, ``num_answers``, ``kb_dim``: :data:`DATA_SIZES`); a name that is
    none of them, or one of those, is refused with an ``InputError`` naming it and the
    valid ones (:func:`applications.checks.model_options`), and so is a value
    ``build_model`` refuses. ``callbacks`` is a list or tuple of Keras callbacks (None:
    none). ``verbose`` is ``fit``'s: 0, 1 or 2. Every argument is checked before any
    example is generated and before the run directory is made (a bad
    ``validation_examples``, ``batch_size``, also one smaller than ``strategy``'s
    replicas, ``callbacks`` or ``verbose`` was refused only once it was there, or not at
    all), and all but ``kb`` and the values of ``model_kwargs`` before the model is built.

    ``precision`` (``"float32"``, ``"mixed_float16"`` or ``"mixed_bfloat16"``) is the Keras
    dtype policy the run builds, trains and saves its model under (its outputs in
    float32); None (the default): the global one. See
    ``applications.arguments.trains_under_precision``.
    """
    import os

    from applications import fault_tolerance
    from applications.demo import plot_history, save_atomically
    from applications.training import spread_steps

    steps = integer_at_least("steps", steps, 1)
    statistics_steps = integer_at_least("statistics_steps", statistics_steps, 1)
    # verbose="no" (taken by fit) trained without its progress, True with it
    verbose = checks.verbosity(verbose)
    # an integer: it also seeds Keras and, offset, the validation questions (-1 failed in
    # keras.utils.set_random_seed, "3" with a TypeError)
    seed = integer_at_least("seed", seed, 0)
    # fewer steps than epochs: one step per epoch, `steps` epochs (each of `epochs` epochs ran
    # a step, so steps=3 with epochs=10 trained 10 steps)
    epochs = min(integer_at_least("epochs", epochs, 1), steps)
    # before the run directory is made, not once it was (the validation questions, the
    # training stream, the callbacks given to fit)
    validation_examples = integer_at_least("validation_examples", validation_examples, 2)
    batch_size = integer_at_least("batch_size", batch_size, 1)
    checks.learning_rate(learning_rate)
    callbacks = checks.callback_list(callbacks)
    # a typo in model_kwargs was a TypeError from inside build_model, once the run directory
    # was made; a size of the data (kb_dim=5) failed inside fit, after it (DATA_SIZES)
    model_kwargs = checks.model_options(model_kwargs, build_model, given=("kb", *DATA_SIZES))
    strategy = distribute.resolve_strategy(strategy)
    # every replica holds an example of each batch (distribute.even_batches refused it later)
    distribute.check_replicas(strategy.num_replicas_in_sync, batch_size)
    keras.utils.set_random_seed(seed)
    check_run_dir(run_dir)  # (a file in the way: refused before the model is built)
    with strategy.scope():
        model = clevr.compile_model(build_model(kb=kb, **DATA_SIZES, **model_kwargs), learning_rate)
    create_run_dir(run_dir)  # once the model is built: its options' values are refused before
    val = _validation_sets(validation_examples, seed, kb)
    val_all = validation_data(validation_examples, seed, kb, val)
    # steps // epochs per epoch lost the remainder (20000 steps over 15 epochs trained 19995)
    steps_per_epoch, epoch_steps = spread_steps(steps, epochs)
    # A run resumed from its backup at epoch k goes on with the stream's batches of epoch k
    # (it restarted the stream: epochs 0, 1, ... trained again on their examples).
    start = epoch_steps.steps_before(fault_tolerance.resume_epoch(callbacks, epochs))
    # (and a mid-epoch backup's epoch goes on after the steps it had trained: epoch_steps ends it early too)
    train_ds = fault_tolerance.skip_trained_steps(
        # whole batches: cut only when the replicas do not divide batch_size
        distribute.distribute_dataset_options(
            distribute.even_batches(make_dataset(batch_size, seed, kb=kb, start=start), strategy.num_replicas_in_sync)),
        callbacks, epochs)
    history = model.fit(
        train_ds,
        steps_per_epoch=steps_per_epoch, epochs=epochs, validation_data=val_all, verbose=verbose,
        # the EMA weights' batch-normalization statistics (image stem) from the stream's
        # first batches (symbolic: no batch normalization, nothing is drawn)
        callbacks=[epoch_steps,
                   *clevr.recipe_callbacks(run_dir, make_dataset(batch_size, seed, kb=kb), statistics_steps),
                   *callbacks],
        shuffle=False,
    )
    result = {
        f"{name}_accuracy": float(model.evaluate(*val[r], verbose=0, batch_size=256)[1])
        for r, name in ((0, "non_relational"), (1, "relational"))
    }
    paths = {k: os.path.join(run_dir, f) for k, f in (
        ("model", "model.keras"), ("plot", "history.png"), ("metrics", "metrics.json"),
        ("attention", "attention.png"))}
    save_atomically(model, paths["model"])
    plot_history(fault_tolerance.logged_history(history, callbacks)[0], paths["plot"])
    plot_example_attention(model, val[1][0], paths["attention"])
    # evaluate asks the same validation questions by default
    result.update(parameters=int(model.count_params()), steps=steps, seed=int(seed),
                  validation_examples=int(validation_examples), **paths)
    fault_tolerance.write_metrics_json(result, paths["metrics"])
    fault_tolerance.finish_run(callbacks)  # the outputs are written: the backup goes
    return result


def _validation_sets(validation_examples, seed, kb, selection=False):
    # At least one question of each kind (with 0 or 1 the evaluation of a half found no
    # data and failed only after training); an odd count gives the extra one to the
    # relational half.
    validation_examples = integer_at_least("validation_examples", validation_examples, minimum=2)
    # as train's seed: -1 drew the questions of seed 999 (-1 + 1000), 1.5 was refused as seed=1001.5
    seed = integer_at_least("seed", seed, 0)
    sizes = (validation_examples // 2, validation_examples - validation_examples // 2)
    # selection: questions of their own for a search (seeds [seed, 1000 + r, 1]), never those
    # that train and evaluate report (seed + 1000 + r)
    seeds = [[seed, 1000 + r, 1] if selection else seed + 1000 + r for r in (0, 1)]
    return {r: generate_examples(sizes[r], seeds[r], relational=bool(r), kb=kb) for r in (0, 1)}


def validation_data(validation_examples=2000, seed=0, kb="symbolic", sets=None, selection=False):
    """The validation questions of :func:`train` (half non-relational, then half
    relational; at least 2 questions, an odd one more relational) as one
    ``(inputs, answers)`` pair of arrays; ``sets``: the two halves if already generated.
    ``selection``: other questions of the same kinds, for model selection
    (``tuning.sort_of_clevr``), so that the search never chooses on the questions that
    ``train`` and ``evaluate`` report.

    Raises:
        InputError (a ValueError): ``validation_examples`` is not an integer >= 2, or
            ``seed`` (an integer, as :func:`train`'s, which offsets it) not one >= 0.
    """
    val = sets or _validation_sets(validation_examples, seed, kb, selection)
    inputs = {k: np.concatenate([val[0][0][k], val[1][0][k]]) for k in val[0][0]}
    return inputs, np.concatenate([val[0][1], val[1][1]])


def _is_sort_of_clevr_model(shapes, model):
    """Whether ``model`` takes ``{"question", "kb" | "image"}`` of this task and gives its answer logits."""
    inputs = {getattr(t, "name", ""): tuple(t.shape) for t in keras.tree.flatten(model.inputs)}
    kb_shape = inputs.get("kb")
    image_shape = inputs.get("image")
    return (
        set(inputs) in ({"question", "kb"}, {"question", "image"})
        and len(inputs["question"]) == 2
        and (kb_shape is None or (len(kb_shape) == 3 and kb_shape[-1] == KB_DIM))
        and (image_shape is None or image_shape[1:] == (IMAGE_SIZE, IMAGE_SIZE, 3))
        and checks.single_output_shape(model) == (None, len(ANSWERS))
    )


def evaluate(model_path, validation_examples=None, seed=None, batch_size=256, strategy=None, verbose=0):
    """Relational and non-relational accuracy of a saved model on the validation questions
    of ``train`` (same ``seed``); the knowledge base (symbolic or image) is the model's.

    ``validation_examples`` and ``seed`` (None) default to those ``train`` recorded in
    ``metrics.json`` beside the model, else 2000 and 0: a model trained with another
    seed was scored on other questions than ``train`` reported.

    ``verbose``: 1 shows Keras' progress bars, on stderr (stdout keeps only the result);
    0 (the default) is silent.
    """
    import os

    # 0 scored at Keras' default batch, -3 and 2.5 failed inside TensorFlow
    batch_size = integer_at_least("batch_size", batch_size, 1)
    verbose = checks.verbosity(verbose)  # (as train's)
    if not os.path.exists(model_path):
        raise PathNotFoundError(f"no model at {model_path!r}: train one first with `keras-capsules train`")
    recorded = checks.recorded_integers(model_path, ("seed", "validation_examples"))
    seed = recorded.get("seed", 0) if seed is None else integer_at_least("seed", seed, 0)
    if validation_examples is None:
        validation_examples = recorded.get("validation_examples", 2000)
    strategy = distribute.resolve_strategy(strategy)
    with strategy.scope():
        model = checks.load_model(model_path)
        checks.require_model(
            model, model_path, _is_sort_of_clevr_model, "a Sort-of-CLEVR model", "sort_of_clevr",
            f"inputs question and kb [batch, objects, {KB_DIM}] or image [batch, {IMAGE_SIZE}, {IMAGE_SIZE}, 3], "
            f"{len(ANSWERS)} answer logits out",
        )
        # as clevr.evaluate: also a model saved uncompiled (build_model, then save) scores
        model.compile(loss=clevr.answer_loss(), metrics=["accuracy"])
    names = [getattr(t, "name", "") for t in keras.tree.flatten(model.inputs)]
    kb = "image" if any("image" in n for n in names) else "symbolic"
    val = _validation_sets(validation_examples, seed, kb)
    with console.progress_on_stderr(verbose):
        result = {
            f"{name}_accuracy": float(model.evaluate(*val[r], verbose=verbose, batch_size=batch_size)[1])
            for r, name in ((0, "non_relational"), (1, "relational"))
        }
    result.update(kb=kb, model=model_path)
    return result


# The command-line protocol (applications/registry.py).


def add_arguments(parser, command):
    """Sort-of-CLEVR's options for ``train``, ``evaluate`` and ``tune``."""
    from applications.arguments import non_negative_int, positive_int
    if command == "train":
        parser.set_defaults(epochs=10, batch_size=64)  # the recipe of train()

    parser.add_argument("--validation-examples", type=positive_int, default=None if command == "evaluate" else 2000,
                        help="validation questions, half relational (default: "
                        + ("that of `train`, recorded beside the model, else 2000)" if command == "evaluate"
                           else "%(default)s)"))
    if command == "evaluate":  # the validation questions of `train`: those of the seed it recorded, else 0
        from applications.arguments import recorded_default

        recorded_default(parser, "seed", "seed of the validation questions (default: the one that `train` "
                         "recorded in metrics.json beside the model, else 0)")
    if command in ("train", "tune"):
        parser.add_argument("--kb", choices=("symbolic", "image"), default="symbolic",
                            help="knowledge base: the object list or the rendered scene (default: %(default)s)")
    if command == "tune":
        parser.add_argument("--steps-per-epoch", type=positive_int, default=500,
                            help="training steps of every epoch of a trial (default: %(default)s)")
    if command == "train":
        parser.add_argument("--steps", type=positive_int, default=20000,
                            help="training steps in total, spread over --epochs (the first epochs take one "
                            "more step when they do not divide evenly; with fewer steps than --epochs, one "
                            "step in each of --steps epochs) (default: %(default)s)")
        parser.add_argument("--statistics-steps", type=positive_int, default=100,
                            help="image KB: training batches that re-estimate the stem's batch-normalization "
                            "statistics for the EMA weights at every swap to them (validation, the saved "
                            "model) (default: %(default)s)")
        parser.add_argument("--coordinate-frequencies", type=non_negative_int, default=4,
                            help="symbolic KB: sin/cos frequencies per object coordinate, 0 for the raw "
                                 "coordinates (default: %(default)s)")
        clevr.add_mac_arguments(parser, units=128, mac_steps=4, embedding_dim=64)


def run_train(args, strategy):
    from applications.arguments import train_options

    return train(
        steps=args.steps,
        kb=args.kb,
        learning_rate=args.learning_rate,
        validation_examples=args.validation_examples,
        statistics_steps=args.statistics_steps,
        model_kwargs={**clevr.mac_options(args), "coordinate_frequencies": args.coordinate_frequencies},
        **train_options(args, strategy),
    )


def run_evaluate(args, strategy):
    return evaluate(args.model, validation_examples=args.validation_examples, seed=args.seed,
                    batch_size=distribute.global_batch_size(args.batch_size, strategy), strategy=strategy,
                    verbose=0 if args.quiet else 1)
