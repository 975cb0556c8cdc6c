"""The default demo: a two-layer EM-routing capsule network on handwritten digits.

Needs no download: the 1,797 8x8 digits that scikit-learn ships (``load_digits``) are
the default data. The same builder runs on 28x28 MNIST (see
``benchmarks/em_routing_mnist.py``).

    keras-capsules train                 # this demo, a minute or two on a laptop CPU
    python -m applications train demo --epochs 5 --run-dir runs/demo

The model: a small convolutional stem, a 1x1 convolution that turns every location
into ``primary_capsules`` capsules (one score and one 4x4 pose each), ``EMRouting``
from this variable number of input capsules to ``hidden_capsules`` capsules of 4x4,
and ``EMRouting`` from those to one capsule per class. The class scores are the final
routing scores (logits).
"""

import os

import keras
import numpy as np

from keras_capsules.layers import EMRouting


def build_model(
    input_shape=(8, 8, 1),
    num_classes=10,
    filters=32,
    primary_capsules=8,
    hidden_capsules=16,
    pose_size=4,
    n_iters=2,
    name="em_capsules",
):
    """Builds the demo capsule network.

    Args:
        input_shape: ``(height, width, channels)``; height and width may be None.
        num_classes: number of output capsules (classes).
        filters: channels of the convolutional stem.
        primary_capsules: capsules per location of the last feature map.
        hidden_capsules: output capsules of the first routing layer.
        pose_size: poses are ``pose_size x pose_size`` matrices.
        n_iters: EM iterations of both routing layers. The demo uses 2: in this small
            network, 3 iterations (the paper's default) make the assignments
            saturate early and learning takes several times more epochs.
        name: model name.

    Returns:
        A ``keras.Model`` from images to class logits ``[batch, num_classes]``.
    """
    p = pose_size
    images = keras.Input(input_shape, name="images")
    x = images
    # As in Heinsen's smallNORB model: normalization before each convolution, Swish after.
    for k, stride in enumerate((1, 2)):
        x = keras.layers.BatchNormalization(name=f"norm{k}")(x)
        x = keras.layers.Conv2D(
            filters, 3, strides=stride, padding="same", kernel_initializer="he_normal", name=f"conv{k}"
        )(x)
        x = keras.layers.Activation("swish", name=f"swish{k}")(x)
    scores = keras.layers.BatchNormalization(name="norm_scores")(x)
    scores = keras.layers.Conv2D(primary_capsules, 1, name="primary_scores")(scores)
    poses = keras.layers.BatchNormalization(name="norm_poses")(x)
    poses = keras.layers.Conv2D(primary_capsules * p * p, 1, name="primary_poses")(poses)
    scores = keras.layers.Reshape((-1,), name="capsule_scores")(scores)
    poses = keras.layers.Reshape((-1, p, p), name="capsule_poses")(poses)
    a, mu, _ = EMRouting(hidden_capsules, p, n_iters=n_iters, name="routing1")([scores, poses])
    logits, _, _ = EMRouting(num_classes, p, n_iters=n_iters, n_inp=hidden_capsules, name="routing2")(
        [a, mu]
    )
    return keras.Model(images, logits, name=name)


def load_digits_arrays():
    """The 8x8 digits shipped with scikit-learn: images in [0, 1] ``[n, 8, 8, 1]``, labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype("float32")[..., None]
    return images, digits.target.astype("int32")


def make_datasets(images, labels, batch_size, test_fraction=0.2, seed=0):
    """Shuffled train/test ``tf.data`` pipelines from arrays (a fixed, seeded split)."""
    import tensorflow as tf

    if len(images) != len(labels):
        raise ValueError(f"images and labels differ in length: {len(images)} != {len(labels)}")
    order = np.random.default_rng(seed).permutation(len(images))
    n_test = int(round(len(images) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    train_ds = (
        tf.data.Dataset.from_tensor_slices((images[train], labels[train]))
        .shuffle(len(train), seed=seed, reshuffle_each_iteration=True)
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )
    test_ds = tf.data.Dataset.from_tensor_slices((images[test], labels[test])).batch(batch_size)
    return train_ds, test_ds


def compile_model(model, learning_rate=3e-3):
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def save_atomically(model, path):
    """Saves a ``.keras`` file so that a crash mid-write never replaces a good file."""
    tmp = f"{path}.tmp-{os.getpid()}.keras"
    model.save(tmp)
    os.replace(tmp, path)


def plot_history(history, path):
    """Writes loss and accuracy curves (train and validation) to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, metric in zip(axes, ("loss", "accuracy")):
        for prefix, style in (("", "-"), ("val_", "--")):
            values = history.get(prefix + metric)
            if values:
                ax.plot(range(1, len(values) + 1), values, style, label=(prefix or "train_") + metric)
        ax.set_xlabel("epoch")
        ax.set_title(metric)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def train(run_dir="runs/demo", epochs=15, batch_size=32, learning_rate=3e-3, seed=0, verbose=1):
    """Trains the demo on scikit-learn's digits and writes its outputs to ``run_dir``.

    Writes ``model.keras`` (the trained model), ``history.png`` (learning curves),
    ``metrics.json`` and TensorBoard logs under ``logs/``.

    Returns:
        A dict with the test accuracy, the parameter count and the output paths.
    """
    import json

    keras.utils.set_random_seed(seed)
    os.makedirs(run_dir, exist_ok=True)
    images, labels = load_digits_arrays()
    train_ds, test_ds = make_datasets(images, labels, batch_size, seed=seed)
    model = compile_model(build_model(input_shape=images.shape[1:]), learning_rate)
    if verbose:
        print(f"{model.name}: {model.count_params():,} parameters; training on {len(images)} digits")
    history = model.fit(
        train_ds,
        validation_data=test_ds,
        epochs=epochs,
        verbose=verbose,
        callbacks=[keras.callbacks.TensorBoard(os.path.join(run_dir, "logs"))],
    )
    loss, accuracy = model.evaluate(test_ds, verbose=0)
    paths = {
        "model": os.path.join(run_dir, "model.keras"),
        "plot": os.path.join(run_dir, "history.png"),
        "metrics": os.path.join(run_dir, "metrics.json"),
        "logs": os.path.join(run_dir, "logs"),
    }
    save_atomically(model, paths["model"])
    plot_history(history.history, paths["plot"])
    result = {
        "test_accuracy": float(accuracy),
        "test_loss": float(loss),
        "parameters": int(model.count_params()),
        "epochs": epochs,
        **paths,
    }
    with open(paths["metrics"], "w") as f:
        json.dump(result, f, indent=2)
    return result


def evaluate(model_path, batch_size=64, seed=0):
    """Test accuracy of a saved demo model on the held-out digits."""
    if not os.path.exists(model_path):
        raise FileNotFoundError(f"no model at {model_path!r}: train one first with `keras-capsules train`")
    model = keras.saving.load_model(model_path)
    images, labels = load_digits_arrays()
    _, test_ds = make_datasets(images, labels, batch_size, seed=seed)
    loss, accuracy = model.evaluate(test_ds, verbose=0)
    return {"test_accuracy": float(accuracy), "test_loss": float(loss), "model": model_path}
