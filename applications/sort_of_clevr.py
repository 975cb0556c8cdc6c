"""Sort-of-CLEVR with a symbolic knowledge base, answered by a MAC network.

Sort-of-CLEVR (Santoro et al. 2017) scenes hold six objects, one of each colour,
each a square or a circle at a random position. Questions ask about one object
(its shape; whether it is on the left; whether it is on the top) or about its
relation to the others (the shape of the closest or the farthest object; how many
objects share its shape). Here the scene is given symbolically, as a list of
objects (the knowledge base, one cell per object: colour one-hot, shape one-hot,
x, y), and questions as word tokens, so the task isolates the reasoning.

Data: :func:`generate_examples` (numpy, for a fixed set) and :func:`make_dataset`
(an endless ``tf.data`` stream generated on the fly from a seed).

Model: :func:`build_model`, the MAC architecture of Hudson & Manning 2018: word
embeddings and a BiLSTM (input unit; contextual words are its outputs, the question
vector its final states), a :class:`keras_capsules.layers.MACNetwork` over the
projected object list, and a two-layer classifier on ``[m_p, q]``.
"""

import numpy as np
import keras
import tensorflow as tf

from keras_capsules.layers import MACNetwork

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
)
#: Indices of the relational templates (the others are non-relational).
RELATIONAL = (3, 4, 5)

PAD = "<pad>"
VOCAB = (PAD,) + tuple(
    sorted({w for t in TEMPLATES for w in t.format("").split()} | set(COLORS))
)
WORD_INDEX = {w: i for i, w in enumerate(VOCAB)}
MAX_QUESTION_LENGTH = max(len(t.format("x").split()) for t in TEMPLATES)
NUM_OBJECTS = len(COLORS)
KB_DIM = len(COLORS) + len(SHAPES) + 2


def tokenize(text, length=MAX_QUESTION_LENGTH):
    """Token ids of a question, padded with 0 (``<pad>``) to ``length``."""
    ids = [WORD_INDEX[w] for w in text.split()]
    if len(ids) > length:
        raise ValueError(f"Question longer than length={length}. Received: text={text!r}")
    return np.array(ids + [0] * (length - len(ids)), "int32")


def detokenize(ids):
    return " ".join(VOCAB[i] for i in ids if i != 0)


def random_scene(rng):
    """A scene: ``shapes`` ``[6]`` (0 square, 1 circle) and ``positions`` ``[6, 2]``
    (x to the right, y downwards, in [0, 1]); object ``k`` has colour ``COLORS[k]``."""
    return {
        "shapes": rng.integers(0, len(SHAPES), NUM_OBJECTS),
        "positions": rng.uniform(0.0, 1.0, (NUM_OBJECTS, 2)),
    }


def scene_kb(scene):
    """The knowledge base ``[6, KB_DIM]``: colour one-hot, shape one-hot, x, y."""
    colors = np.eye(NUM_OBJECTS)
    shapes = np.eye(len(SHAPES))[scene["shapes"]]
    return np.concatenate([colors, shapes, scene["positions"]], -1).astype("float32")


def answer(scene, template, color):
    """The answer index (into ``ANSWERS``) of question ``template`` about ``color``."""
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
    raise ValueError(f"`template` must be in [0, {len(TEMPLATES)}). Received: template={template}")


def _example(rng, templates):
    scene = random_scene(rng)
    template = int(rng.choice(templates))
    color = int(rng.integers(0, NUM_OBJECTS))
    tokens = tokenize(TEMPLATES[template].format(COLORS[color]))
    return tokens, scene_kb(scene), answer(scene, template, color)


def _templates(relational):
    if relational is None:
        return np.arange(len(TEMPLATES))
    if relational is True:
        return np.array(RELATIONAL)
    if relational is False:
        return np.array([t for t in range(len(TEMPLATES)) if t not in RELATIONAL])
    raise ValueError(f"`relational` must be None, True or False. Received: relational={relational!r}")


def generate_examples(num_examples, seed=0, relational=None):
    """``num_examples`` examples as numpy arrays.

    Args:
        num_examples: how many.
        seed: seed of the scenes and questions.
        relational: None for all question types, True for the relational ones only,
            False for the non-relational ones only.

    Returns:
        ``({"question": int32 [n, MAX_QUESTION_LENGTH], "kb": float32 [n, 6, KB_DIM]},
        answers int32 [n])``.
    """
    rng = np.random.default_rng(seed)
    templates = _templates(relational)
    examples = [_example(rng, templates) for _ in range(num_examples)]
    tokens, kbs, answers = zip(*examples) if examples else ((), (), ())
    return (
        {
            "question": np.stack(tokens).reshape(-1, MAX_QUESTION_LENGTH).astype("int32"),
            "kb": np.stack(kbs).reshape(-1, NUM_OBJECTS, KB_DIM).astype("float32"),
        },
        np.array(answers, "int32"),
    )


def make_dataset(batch_size=64, seed=0, relational=None):
    """An endless ``tf.data.Dataset`` of batches generated on the fly.

    Elements are ``({"question": [batch, MAX_QUESTION_LENGTH] int32,
    "kb": [batch, 6, KB_DIM] float32}, answers [batch] int32)``; the same seed gives
    the same stream.
    """
    templates = _templates(relational)

    def stream():
        rng = np.random.default_rng(seed)
        while True:
            tokens, kb, ans = _example(rng, templates)
            yield {"question": tokens, "kb": kb}, np.int32(ans)

    signature = (
        {
            "question": tf.TensorSpec((MAX_QUESTION_LENGTH,), tf.int32),
            "kb": tf.TensorSpec((NUM_OBJECTS, KB_DIM), tf.float32),
        },
        tf.TensorSpec((), tf.int32),
    )
    ds = tf.data.Dataset.from_generator(stream, output_signature=signature)
    return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def build_model(
    units=128,
    max_steps=4,
    embedding_dim=64,
    vocabulary_size=len(VOCAB),
    num_answers=len(ANSWERS),
    kb_dim=KB_DIM,
    self_attention=False,
    memory_gate=False,
    memory_dropout=0.0,
    output_dropout=0.0,
    name="sort_of_clevr_mac",
):
    """The MAC model for Sort-of-CLEVR with a symbolic knowledge base.

    Args:
        units: the MAC dimension ``d`` (memory, control, contextual words; even).
        max_steps: reasoning steps ``p``.
        embedding_dim: word-embedding size.
        vocabulary_size, num_answers, kb_dim: the task's sizes (defaults: this module's).
        self_attention, memory_gate, memory_dropout: passed to ``MACNetwork``.
        output_dropout: dropout before the classifier's hidden layer.
        name: model name.

    Returns:
        A ``keras.Model`` with inputs ``{"question": int [batch, length] (0 = padding),
        "kb": float [batch, objects, kb_dim]}`` and answer logits ``[batch, num_answers]``.
    """
    if units % 2:
        raise ValueError(f"`units` must be even (a BiLSTM of units // 2 each way). Received: units={units}")
    tokens = keras.Input((None,), dtype="int32", name="question")
    kb_in = keras.Input((None, kb_dim), name="kb")
    # Input unit: embeddings + BiLSTM; the padding mask follows the contextual words.
    embedded = keras.layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True)(tokens)
    words, forward_h, _, backward_h, _ = keras.layers.Bidirectional(
        keras.layers.LSTM(units // 2, return_sequences=True, return_state=True)
    )(embedded)
    question = keras.layers.Concatenate(name="question_vector")([forward_h, backward_h])
    kb = keras.layers.Dense(units, name="kb_projection")(kb_in)
    memory = MACNetwork(
        max_steps=max_steps,
        self_attention=self_attention,
        memory_gate=memory_gate,
        memory_dropout=memory_dropout,
        name="mac",
    )([words, question, kb])
    # Output unit: a two-layer classifier on [m_p, q].
    x = keras.layers.Concatenate()([memory, question])
    x = keras.layers.Dropout(output_dropout)(x)
    x = keras.layers.Dense(units, activation="elu")(x)
    logits = keras.layers.Dense(num_answers, name="answer")(x)
    return keras.Model({"question": tokens, "kb": kb_in}, logits, name=name)
