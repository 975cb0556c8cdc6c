"""``--precision`` of ``train`` and ``tune``: every application builds and trains under
Keras' mixed-precision dtype policies (mixed_float16 for GPUs, mixed_bfloat16 for TPUs).

Each tiny run (the sizes of test_cli_applications.py) checks: the model trained computes
in the policy's dtype with float32 weights, a ``LossScaleOptimizer`` wraps the optimizer
under mixed_float16, the loss of the epoch is finite, the saved model evaluates to finite
metrics without any option, and the global policy is float32 again after the command
(on an error too). A resume with another precision is refused; a bad value is argparse's
error.
"""

import json
import math

import keras
import numpy as np
import pytest

from applications import __main__ as cli
from applications import arguments
from tests.applications.cli_helpers import TINY_MODEL
from tests.applications.test_cli_applications import TINY, TINY_EVALUATE, small_data, tiny  # noqa: F401
from tests.applications.tiny_data import CLEVR_IMAGE_SIZE, SST_DIR, tiny_bert_preset, tiny_clevr_cache

COMPUTE = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
TRAIN = {**TINY, "demo": ["--limit", "24", *TINY_MODEL, "--batch-size", "8"]}
EVALUATE = {**TINY_EVALUATE, "demo": ["--limit", "24"]}


class _Seen(keras.callbacks.Callback):
    """Records the model that ``fit`` trains, the global policy while it trains, its losses."""

    def __init__(self, seen):
        super().__init__()
        self.seen = seen

    def on_train_begin(self, logs=None):
        self.seen.setdefault("models", []).append(self.model)
        self.seen.setdefault("policies", []).append(keras.config.dtype_policy().name)

    def on_epoch_end(self, epoch, logs=None):
        self.seen.setdefault("losses", []).append(float(logs["loss"]))


@pytest.fixture
def seen(monkeypatch):
    """What the runs' ``fit`` calls trained (see :class:`_Seen`), and under ``"loaded"``
    the models that ``evaluate`` loaded (``checks.load_model``, which every application's
    evaluate loads its model with)."""
    from applications import checks, fault_tolerance

    found = {}
    make = fault_tolerance.resumable_callbacks
    monkeypatch.setattr(fault_tolerance, "resumable_callbacks", lambda *a, **kw: [*make(*a, **kw), _Seen(found)])
    load = checks.load_model

    def load_model(*args, **kwargs):
        model = load(*args, **kwargs)
        found.setdefault("loaded", []).append(model)
        return model

    monkeypatch.setattr(checks, "load_model", load_model)
    return found


def _output_layers(model):
    """The layers that make ``model``'s outputs, and the layers inside them."""
    made = [t._keras_history.operation for t in keras.tree.flatten(model.outputs)]
    return {id(sub) for layer in made for sub in layer._flatten_layers(include_self=True)}


def _check_policies(model, precision):
    """``model`` built under ``precision``: its outputs float32 (made by float32 layers),
    every other layer with weights computing in the policy's 16 bits, weights float32."""
    compute = COMPUTE[precision]
    assert model.dtype_policy.name == precision
    assert [t.dtype for t in keras.tree.flatten(model.outputs)] == ["float32"] * len(keras.tree.flatten(model.outputs))
    outputs = _output_layers(model)
    computing = [layer for layer in model._flatten_layers(include_self=False) if layer.weights]
    hidden = [layer for layer in computing if id(layer) not in outputs]
    assert hidden
    for layer in hidden:  # (every hidden layer with weights, the library's own and Keras')
        assert (layer.dtype_policy.name, layer.compute_dtype) == (precision, compute), layer.name
    for layer in model._flatten_layers(include_self=False):
        if id(layer) in outputs:
            assert layer.compute_dtype == "float32", layer.name
    assert all(w.dtype == "float32" for w in model.weights if w.trainable)


def _check_model(model, precision):
    _check_policies(model, precision)
    is_scaled = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert is_scaled == (precision == "mixed_float16"), type(model.optimizer)


def _non_finite(metrics):
    return [k for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)]


def _train_and_evaluate(name, train, evaluate, precision, tmp_path, capsys, seen):
    run_dir = tmp_path / "run"
    assert keras.config.dtype_policy().name == "float32"
    code = cli.main(["train", name, *train, "--epochs", "1", "--quiet", "--precision", precision,
                     "--run-dir", str(run_dir)])
    assert code == 0, capsys.readouterr().err
    assert keras.config.dtype_policy().name == "float32"  # put back after the run
    assert seen["policies"] and set(seen["policies"]) == {precision}
    _check_model(seen["models"][0], precision)
    assert seen["losses"] and all(math.isfinite(loss) for loss in seen["losses"]), seen["losses"]
    loaded_before = len(seen.get("loaded", []))
    capsys.readouterr()
    code = cli.main(["evaluate", name, *evaluate, "--model", str(run_dir / "model.keras")])
    out, err = capsys.readouterr()
    assert code == 0, err
    # the saved model's layers keep the policy (the functional model's own is not saved):
    # those of the model evaluate loaded from model.keras (one load, not another here)
    loaded = seen["loaded"][loaded_before:]
    assert len(loaded) == 1, loaded
    policies = {layer.dtype_policy.name for layer in loaded[0]._flatten_layers(include_self=False) if layer.weights}
    assert precision in policies, policies
    metrics = json.loads(out)
    assert "not finite" not in err and not _non_finite(metrics), (metrics, err)
    assert keras.config.dtype_policy().name == "float32"
    return metrics


RUNNABLE = ["demo", "sort_of_clevr", "music", "occluded_mnist", "text_classification", "textured_mnist"]


@pytest.mark.graph_mode  # as a user's run: traced
@pytest.mark.parametrize("name, precision", [
    *[(name, "mixed_bfloat16") for name in RUNNABLE],
    # (the others pass under mixed_float16 too: checked by hand, left out for time)
    ("demo", "mixed_float16"), ("music", "mixed_float16"), ("sort_of_clevr", "mixed_float16"),
])
def test_tiny_train_then_evaluate_under_mixed_precision(name, precision, small_data, tmp_path, capsys, seen):
    _train_and_evaluate(name, tiny(name, small_data, TRAIN), tiny(name, small_data, EVALUATE), precision,
                        tmp_path, capsys, seen)


@pytest.mark.graph_mode
def test_sst_under_mixed_bfloat16_and_its_cache_is_the_float32_one(tmp_path, capsys, seen):
    preset = tiny_bert_preset(tmp_path / "preset")
    data = ["--data-dir", str(SST_DIR), "--granularity", "2", "--preset", preset, "--max-eval", "16",
            "--max-length", "12"]
    train = [*data, "--train-on", "sentences", "--max-train", "16", "--hidden-dim", "8", "--hidden-capsules", "4",
             "--n-iters", "2", "--batch-size", "16"]
    _train_and_evaluate("sst", train, data, "mixed_bfloat16", tmp_path, capsys, seen)
    # the frozen transformer's hidden states were cached in float32, as a float32 run makes them
    cached = sorted((tmp_path / "run" / "cache").iterdir())
    assert cached
    for path in cached:
        if path.suffix == ".npy":
            assert np.load(path).dtype == np.float32, path


@pytest.mark.graph_mode
def test_clevr_under_mixed_bfloat16(tmp_path, capsys, seen):
    cache = tiny_clevr_cache(tmp_path / "cache")
    data = ["--cache-dir", cache, "--image-size", str(CLEVR_IMAGE_SIZE), "--data-dir", str(tmp_path / "no-tfds")]
    train = [*data, "--units", "8", "--mac-steps", "1", "--embedding-dim", "4", "--batch-size", "4"]
    _train_and_evaluate("clevr", train, data, "mixed_bfloat16", tmp_path, capsys, seen)


@pytest.mark.graph_mode
def test_smallnorb_under_mixed_bfloat16_on_mock_data(tmp_path, capsys, seen, monkeypatch):
    import tensorflow_datasets as tfds

    from applications import tfds_data

    monkeypatch.setattr(tfds_data, "require_prepared", lambda name, data_dir=None: None)
    data = ["--data-dir", str(tmp_path / "tfds"), "--image-size", "24", "--validation-steps", "1",
            "--batch-size", "4"]
    with tfds.testing.mock_data(num_examples=8):
        _train_and_evaluate("smallnorb", [*data, "--steps-per-epoch", "1", "--channels", "8", "--parts", "8"],
                            data, "mixed_bfloat16", tmp_path, capsys, seen)


class _CrashAfterEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        raise RuntimeError("crash (simulated)")


def test_a_resume_with_another_precision_is_refused_and_the_policy_put_back(tmp_path, capsys, monkeypatch):
    from applications import fault_tolerance

    run_dir = tmp_path / "run"
    argv = ["train", "demo", "--limit", "16", *TINY_MODEL, "--batch-size", "8", "--epochs", "2", "--quiet",
            "--run-dir", str(run_dir)]
    make = fault_tolerance.resumable_callbacks
    monkeypatch.setattr(fault_tolerance, "resumable_callbacks",
                        lambda *a, **kw: [*make(*a, **kw), _CrashAfterEpoch()])
    with pytest.raises(RuntimeError, match="simulated"):
        cli.main([*argv, "--precision", "mixed_bfloat16"])
    assert keras.config.dtype_policy().name == "float32"  # put back on the error too
    monkeypatch.setattr(fault_tolerance, "resumable_callbacks", make)
    assert fault_tolerance.backup_epoch(str(run_dir / "backup")) == 1
    capsys.readouterr()
    for other in ([], ["--precision", "float32"], ["--precision", "mixed_float16"]):
        assert cli.main([*argv, *other]) == 2
        err = capsys.readouterr().err
        assert "other options: --precision mixed_bfloat16 (now" in err and len(err.strip().splitlines()) == 1, err
        assert keras.config.dtype_policy().name == "float32"
    assert fault_tolerance.backup_epoch(str(run_dir / "backup")) == 1


def test_a_float32_backup_of_a_run_made_before_the_option_resumes(tmp_path):
    """A backup made before ``--precision`` existed records no precision: it trained in
    float32, so a resume without the option (or with float32) goes on; another is refused."""
    from applications import fault_tolerance
    from applications.errors import CommandLineError

    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / "training_metadata.json").write_text(json.dumps({"epoch": 1, "options": {"seed": 0}}))
    fault_tolerance._check_backup_options(str(backup), {"seed": 0, "precision": "float32"})
    with pytest.raises(CommandLineError, match=r"--precision float32 \(now mixed_float16\)"):
        fault_tolerance._check_backup_options(str(backup), {"seed": 0, "precision": "mixed_float16"})


@pytest.mark.parametrize("command", ["train", "tune"])
def test_a_bad_precision_is_argparses_error(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "demo", "--precision", "float16"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --precision: invalid choice: 'float16'" in err and err.count("\n") == 1, err


def test_evaluate_has_no_precision_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["evaluate", "demo", "--precision", "mixed_bfloat16"])
    assert "--precision" in capsys.readouterr().err


def test_precision_policy_puts_the_policy_back_on_an_error():
    keras.config.set_dtype_policy("float32")
    with pytest.raises(ZeroDivisionError):
        with arguments.precision_policy("mixed_float16"):
            assert keras.config.dtype_policy().name == "mixed_float16"
            1 / 0
    assert keras.config.dtype_policy().name == "float32"
    # a policy set by the user outside: None leaves it in force, another comes and goes
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        with arguments.precision_policy(None):
            assert keras.config.dtype_policy().name == "mixed_bfloat16"
        with arguments.precision_policy("float32"):
            assert keras.config.dtype_policy().name == "float32"
        assert keras.config.dtype_policy().name == "mixed_bfloat16"
    finally:
        keras.config.set_dtype_policy("float32")
    with pytest.raises(ValueError, match="precision"):
        with arguments.precision_policy("float16"):
            pass


def test_the_cached_feature_extractors_compute_in_float32_under_a_mixed_policy(tmp_path):
    """SST's frozen transformer and CLEVR's ResNet-101 write caches that runs of any
    precision read: built under a mixed policy (``--precision``, or the user's own), they
    computed the cached features in 16 bits, and a float32 run then read those."""
    from applications import clevr, sst

    preset = tiny_bert_preset(tmp_path / "preset")
    keras.config.set_dtype_policy("mixed_bfloat16")  # (as a user of the Python API sets it)
    try:
        encoder = sst.Encoder.from_preset(preset, max_length=12)
        extractor = clevr.feature_extractor(CLEVR_IMAGE_SIZE, weights=None)
    finally:
        keras.config.set_dtype_policy("float32")
    for model in (encoder.backbone, extractor):
        policies = {layer.dtype_policy.name for layer in model._flatten_layers(include_self=False) if layer.weights}
        assert policies == {"float32"}, (model.name, policies)
    images = np.zeros((1, CLEVR_IMAGE_SIZE, CLEVR_IMAGE_SIZE, 3), "float32")
    assert keras.ops.convert_to_tensor(extractor(images)).dtype == "float32"


def test_tune_builds_every_trial_under_the_policy(tmp_path, capsys, monkeypatch):
    # Eager (the folder's default; 4 s, traced 12 s): the policy a trial is built under,
    # its model's and its optimizer are read as the trial's model is built, before any
    # step runs. Traced training under mixed_float16 (the loss-scaled step of the same
    # demo model) is test_tiny_train_then_evaluate_under_mixed_precision[demo-mixed_float16].
    import tuning

    built = []
    hypermodel = tuning.HYPERMODELS["demo"]
    real_build = hypermodel.build

    def build(self, hp):
        model = real_build(self, hp)
        built.append((keras.config.dtype_policy().name, model.dtype_policy.name,
                      isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)))
        return model

    monkeypatch.setattr(hypermodel, "build", build)
    argv = ["tune", "demo", "--limit", "24", "--batch-size", "8", "--tuner", "random", "--max-trials", "2",
            "--epochs", "1", "--quiet", "--directory", str(tmp_path / "tune")]
    for fixed in ("filters=8", "primary_capsules=2", "hidden_capsules=4", "pose_size=2", "n_iters=2"):
        argv += ["--fixed", fixed]
    assert cli.main([*argv, "--precision", "mixed_float16"]) == 0, capsys.readouterr().err
    assert built and all(b == ("mixed_float16", "mixed_float16", True) for b in built), built
    assert keras.config.dtype_policy().name == "float32"
    capsys.readouterr()
    # the search resumed with another precision is refused
    for other in (["--precision", "mixed_bfloat16"], []):
        assert cli.main([*argv, "--max-trials", "3", *other]) == 2
        err = capsys.readouterr().err
        assert "was started with --precision mixed_float16" in err and err.count("\n") == 1, err


# ---- the applications' models: float32 outputs under a mixed policy (Python API)


def _builders():
    from applications import clevr, demo, music, occluded_mnist, smallnorb, sort_of_clevr, sst, textured_mnist
    from applications.text_classification import model as text_model

    return {  # tiny models of every application's build_model (and the read-outs that differ)
        "demo": lambda: demo.build_model(filters=4, primary_capsules=2, hidden_capsules=3, pose_size=2),
        "smallnorb": lambda: smallnorb.build_model(n_parts=4, d_chns=4, image_size=16, n_iters=2),
        "sst": lambda: sst.build_model(3, 8, num_classes=2, hidden_dim=4, hidden_capsules=3, n_iters=2),
        "clevr": lambda: clevr.build_model(10, 5, feature_shape=(3, 3, 8), units=8, embedding_dim=4, max_steps=1),
        "sort_of_clevr": lambda: sort_of_clevr.build_model(units=8, max_steps=1, embedding_dim=4),
        "occluded_mnist": lambda: occluded_mnist.build_model(num_frames=3, frame_size=8, conv_units=(2, 2),
                                                             dense_units=4),
        "music": lambda: music.build_model(4, units=(4, 3)),
        "music-no-decoder": lambda: music.build_model(4, units=(4, 3), use_decoder=False),
        "music-nade": lambda: music.build_model(4, units=(4, 3), readout="nade", nade_units=3),
        "music-nade-no-decoder": lambda: music.build_model(4, units=(4, 3), readout="nade", nade_units=3,
                                                           use_decoder=False),
        "textured_mnist": lambda: textured_mnist.build_model(n_groups=2, n_iters=1, image_size=8, conv_units=2,
                                                             dense_units=4, num_classes=3, head_units=4),
        "text_classification": lambda: text_model.build_model(20, 3, embedding_dim=4, num_codebooks=2, gru_units=8,
                                                              capsule_dim=4, class_capsule_dim=2, n_iters=1),
        "text_classification-linear": lambda: text_model.build_model(20, 3, routing="linear", embedding_dim=4,
                                                                     num_codebooks=2, gru_units=8),
    }


def _call_on_ones(model):
    """The model's outputs (eager) on a batch of 2 of ones (ids of 1 for integer inputs)."""
    def ones(t):
        return np.ones([2 if d is None else d for d in t.shape], t.dtype)

    inputs = keras.tree.map_structure(ones, model.input)
    return keras.tree.flatten(model(inputs, training=False))


BUILDERS = list(_builders())


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
@pytest.mark.parametrize("name", BUILDERS)
def test_every_model_makes_float32_outputs_under_a_mixed_policy(name, precision):
    # eager; all 26 cases take about 5 s
    with arguments.precision_policy(precision):
        model = _builders()[name]()
    assert keras.config.dtype_policy().name == "float32"
    _check_policies(model, precision)
    outputs = _call_on_ones(model)
    assert [str(keras.ops.convert_to_tensor(y).dtype.name) for y in outputs] == ["float32"] * len(outputs)
    assert all(np.all(np.isfinite(keras.ops.convert_to_numpy(y))) for y in outputs)


@pytest.mark.parametrize("name", BUILDERS)
def test_under_float32_the_models_are_those_built_before(name, monkeypatch):
    """float32 (the default): every layer float32, and the model (config and weights for a
    seed) that the builder made before the output layers' float32 policy existed."""
    keras.backend.clear_session()  # (the automatic names count from 0 again)
    keras.utils.set_random_seed(3)
    model = _builders()[name]()
    assert {layer.dtype_policy.name for layer in model._flatten_layers()} == {"float32"}
    monkeypatch.setattr(arguments, "output_dtype", lambda: None)  # (the builders as they were)
    keras.backend.clear_session()
    keras.utils.set_random_seed(3)
    before = _builders()[name]()
    assert model.get_config() == before.get_config()
    assert len(model.weights) == len(before.weights)
    for w, b in zip(model.weights, before.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(w), keras.ops.convert_to_numpy(b), err_msg=w.path)


def test_output_dtype():
    assert arguments.output_dtype() is None
    for policy, expected in (("mixed_float16", "float32"), ("mixed_bfloat16", "float32"), ("bfloat16", None)):
        with arguments.precision_policy(policy) if policy != "bfloat16" else _global_policy(policy):
            assert arguments.output_dtype() == expected, policy


class _global_policy:
    def __init__(self, policy):
        self.policy = policy

    def __enter__(self):
        keras.config.set_dtype_policy(self.policy)

    def __exit__(self, *exc):
        keras.config.set_dtype_policy("float32")


# ---- train(precision=...) from Python


def _trains():
    from applications import clevr, demo, music, occluded_mnist, smallnorb, sort_of_clevr, sst, textured_mnist
    from applications.text_classification import recipe

    return {"demo": demo.train, "smallnorb": smallnorb.train, "sst": sst.train, "clevr": clevr.train,
            "sort_of_clevr": sort_of_clevr.train, "occluded_mnist": occluded_mnist.train, "music": music.train,
            "textured_mnist": textured_mnist.train, "text_classification": recipe.train}


@pytest.mark.parametrize("name", list(_trains()))
def test_every_train_takes_a_precision_and_refuses_a_bad_one_at_once(name, tmp_path):
    import inspect

    from applications.errors import InputError

    train = _trains()[name]
    assert inspect.signature(train).parameters["precision"].default is None
    assert "``precision``" in train.__doc__ or "precision:" in train.__doc__
    run_dir = tmp_path / "run"
    args = {"clevr": {"cache_dir": str(tmp_path / "cache")}, "sst": {"data_dir": str(tmp_path / "sst")}}.get(name, {})
    with pytest.raises(InputError) as error:
        train(run_dir=str(run_dir), precision="float16", **args)
    message = str(error.value)
    assert message == ("`precision` must be one of float32, mixed_float16, mixed_bfloat16. "
                       "Received: precision='float16'"), message
    assert not run_dir.exists() and keras.config.dtype_policy().name == "float32"


def _demo_train(run_dir, **kwargs):
    from applications import demo

    return demo.train(run_dir=str(run_dir), epochs=kwargs.pop("epochs", 1), batch_size=8, limit=24, verbose=0,
                      model_options={"filters": 4, "primary_capsules": 2, "hidden_capsules": 3, "pose_size": 2},
                      **kwargs)


def test_python_train_under_a_precision_records_it_and_puts_the_policy_back(tmp_path):
    # eager, about 10 s: a tiny fit of the demo under mixed_bfloat16 from Python
    from applications import fault_tolerance

    seen = {}
    result = _demo_train(tmp_path / "run", precision="mixed_bfloat16", callbacks=[_Seen(seen)])
    assert keras.config.dtype_policy().name == "float32"
    assert seen["policies"] == ["mixed_bfloat16"]
    _check_policies(seen["models"][0], "mixed_bfloat16")
    assert math.isfinite(seen["losses"][0]) and math.isfinite(result["test_loss"])
    loaded = keras.saving.load_model(result["model"])
    assert [layer.dtype_policy.name for layer in loaded.layers if layer.name == "routing2"] == ["float32"]
    assert "mixed_bfloat16" in {layer.dtype_policy.name for layer in loaded.layers if layer.weights}

    # a run that crashed under mixed_bfloat16: the policy is put back, its backup refuses the others
    run_dir = tmp_path / "crashed"
    with pytest.raises(RuntimeError, match="simulated"):
        _demo_train(run_dir, epochs=2, precision="mixed_bfloat16", callbacks=[_CrashAfterEpoch()])
    assert keras.config.dtype_policy().name == "float32"
    assert fault_tolerance.backup_epoch(str(run_dir / "backup")) == 1
    for other in (None, "float32", "mixed_float16"):
        with pytest.raises(fault_tolerance.BackupMismatchError, match=r"precision"):
            _demo_train(run_dir, epochs=2, precision=other)
        assert keras.config.dtype_policy().name == "float32"
    assert fault_tolerance.backup_epoch(str(run_dir / "backup")) == 1


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16", "float32"])
def test_a_saved_model_loads_with_its_optimizer_and_its_state(precision, tmp_path):
    """``checks.load_model`` (every ``evaluate``'s loader) under the float32 global policy: a
    model trained under mixed_float16 comes back with its ``LossScaleOptimizer`` and every
    optimizer variable (the loss scale, the moments) as saved, without Keras' "Skipping
    variable loading for optimizer" warning (the functional model's own policy is not saved,
    so Keras compiled a plain optimizer); the others with their plain one; the global policy
    float32 after."""
    import warnings

    from applications import checks, demo

    with arguments.precision_policy(precision):
        model = demo.build_model(filters=4, primary_capsules=2, hidden_capsules=3, pose_size=2)
        model.compile(keras.optimizers.Adam(1e-3),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = np.random.default_rng(0).uniform(size=(4, 8, 8, 1)).astype("float32")
        model.fit(x, np.arange(4), batch_size=2, epochs=1, verbose=0)
        path = tmp_path / "model.keras"
        model.save(path)
    assert keras.config.dtype_policy().name == "float32"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = checks.load_model(path)
    assert not [w for w in caught if "Skipping variable loading" in str(w.message)], [str(w.message) for w in caught]
    assert keras.config.dtype_policy().name == "float32"
    assert type(loaded.optimizer) is type(model.optimizer)
    assert isinstance(loaded.optimizer, keras.optimizers.LossScaleOptimizer) == (precision == "mixed_float16")
    saved = [v.numpy() for v in model.optimizer.variables]
    assert len(saved) > 2 and len(loaded.optimizer.variables) == len(saved)
    for want, got in zip(saved, loaded.optimizer.variables):
        np.testing.assert_array_equal(got.numpy(), want)


def test_backup_callbacks_made_outside_train_record_the_precision_it_trains_under(tmp_path):
    # (2026-12-07) A backup recorded the policy in force when resumable_callbacks was
    # called: callbacks made under float32 and given to train(precision="mixed_bfloat16")
    # recorded float32, and the run was resumed under float32 or mixed_float16 without a
    # word. The backup now records the policy in force when training begins.
    # (eager, about 5 s: sort_of_clevr's MAC, one step in each of 2 epochs)
    from applications import fault_tolerance
    from applications import sort_of_clevr as soc
    from tests.applications.cli_helpers import CrashAt

    run_dir = tmp_path / "run"
    backup = run_dir / fault_tolerance.BACKUP_DIR

    def train(precision, *extra):
        # made here, under float32, outside train's policy
        callbacks = [*fault_tolerance.resumable_callbacks(str(run_dir), run_options={"seed": 0}), *extra]
        return soc.train(str(run_dir), steps=2, epochs=2, batch_size=4, learning_rate=3e-3, validation_examples=2,
                         verbose=0, model_kwargs={"units": 8, "embedding_dim": 4, "max_steps": 1},
                         callbacks=callbacks, precision=precision)

    with pytest.raises(RuntimeError, match="simulated"):
        train("mixed_bfloat16", CrashAt(1))
    assert keras.config.dtype_policy().name == "float32"
    assert json.loads((backup / "training_metadata.json").read_text())["options"] == {
        "seed": 0, "precision": "mixed_bfloat16"}

    def files():
        return sorted((str(p), p.stat().st_mtime_ns) for p in run_dir.rglob("*") if p.is_file())

    before = files()
    for other, now in ((None, "float32"), ("float32", "float32"), ("mixed_float16", "mixed_float16")):
        with pytest.raises(fault_tolerance.BackupMismatchError) as error:
            train(other)
        # refused in train before fit, whose TensorBoard callback (before the backup's) wrote logs
        assert files() == before
        message = str(error.value)
        assert f"other options: --precision mixed_bfloat16 (now {now});" in message and "\n" not in message, message
        assert keras.config.dtype_policy().name == "float32"
        assert fault_tolerance.backup_epoch(str(backup)) == 1
    seen = {}
    result = train("mixed_bfloat16", _Seen(seen))
    assert seen["policies"] == ["mixed_bfloat16"] and keras.config.dtype_policy().name == "float32"
    # it resumed at epoch 1 (trained that epoch alone), and finished the run
    assert len(seen["losses"]) == 1 and result["steps"] == 2 and not backup.exists()
