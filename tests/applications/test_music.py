"""JSB Chorales application: piano rolls, padding masks, the RLadder model, learning."""

import json
import re

import keras
import numpy as np
import pytest

from applications import music
from applications.errors import InputError, PathNotFoundError
from tests.applications.cli_helpers import CrashAt
from tests.applications.short_data import write_short_chorales
from tests.applications.verbose_checks import VERBOSE_VALUES, assert_verbose_checked_first, reached
from tests.conftest import as_an_application_test, shared_path

DATA = shared_path("data", "jsb_chorales", "jsb_chorales.json")
TINY = dict(units=(8, 4))


@pytest.fixture(scope="module")
def chorales():
    return music.load_chorales(DATA)


@pytest.fixture(scope="module")
def short_data(tmp_path_factory):
    """The first real chorales of every split cut to 6-16 steps (read-only: tests train
    on it, each in a run directory of its own). The training tests' checks do not need
    the real lengths (up to 129 steps), which the unrolled ladder and ``nll_per_step``
    pay for step by step."""
    return write_short_chorales(tmp_path_factory.mktemp("short_chorales"))


@pytest.fixture(scope="module")
def ensemble_run(tmp_path_factory, short_data):
    """One ensemble run (read-only) for test_train_an_ensemble_with_dropout_and_output_bias
    and test_train_with_the_nade_readout_from_the_command_line, which each trained one:
    member 0 a gated ladder with the NADE read-out, member 1 an LSTM ladder with the
    independent one, both with sequence dropout, zoneout and the output bias started at
    the key log-odds. Returns the run directory, train's result and the members whose
    callbacks were asked for."""
    run_dir, budgets = tmp_path_factory.mktemp("ensemble_run"), []
    with as_an_application_test():  # a module fixture is set up before the tests' autouse ones
        result = music.train(short_data, run_dir=str(run_dir), epochs=1, batch_size=4, window=2, limit=3,
                             dropout=0.2, dropout_noise="sequence", zoneout=0.1, init_output_bias=True, ensemble=2,
                             encoder=("gated", "lstm"), readout=["nade", "independent"], nade_units=4, verbose=0,
                             sample_steps=4, callbacks=lambda member: budgets.append(member) or [], **TINY)
    return run_dir, result, budgets


def _short_rolls(chorales, split, lengths=(20, 13, 17, 11)):
    """Piano rolls of the first chorales of ``split`` cut to ``lengths`` steps (longer
    than the 4 steps the tests' models are built for: whole chorales are scored by a
    model of their length with the same weights)."""
    return [music.piano_roll(c[:n]) for c, n in zip(chorales[split], lengths, strict=False)]


def test_split_counts_and_piano_rolls(chorales):
    assert {s: len(chorales[s]) for s in music.SPLITS} == {"train": 229, "valid": 76, "test": 77}
    assert sum(len(c) for c in chorales["train"]) == 13_807
    chorale = chorales["train"][0]
    roll = music.piano_roll(chorale)
    assert roll.shape == (len(chorale), 88) and roll.dtype == np.float32
    assert set(np.unique(roll)) <= {0.0, 1.0}
    for t, pitches in enumerate(chorale):
        assert sorted(np.flatnonzero(roll[t]) + 21) == sorted(pitches)
    assert music.piano_roll([[21, 108], []]).sum(axis=1).tolist() == [2.0, 0.0]
    with pytest.raises(ValueError, match="outside the piano"):
        music.piano_roll([[20]])
    with pytest.raises(FileNotFoundError, match="JSB"):
        music.load_chorales(DATA.parent / "missing.json")


def test_next_step_arrays_shift_and_mask():
    rolls = [np.eye(88, dtype="float32")[:3], np.eye(88, dtype="float32")[5:6]]
    inputs, targets, mask = music.next_step_arrays(rolls)
    assert inputs.shape == targets.shape == (2, 3, 88) and mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert np.all(inputs[:, 0] == 0) and np.array_equal(inputs[0, 1:], targets[0, :2])
    assert targets[1, 1:].sum() == 0
    w_in, w_t, w_m = music.windows(inputs, targets, mask, 2)
    assert w_in.shape == (3, 2, 88)  # the second chorale's empty window is dropped
    assert w_m.tolist() == [[1, 1], [1, 0], [1, 0]]


def test_training_batches_counts_what_make_dataset_builds(chorales):
    # counted from the rolls' lengths (it built every example to count them); the count is
    # the batches of an epoch of make_dataset, which fit's steps_per_epoch must match
    from applications import distribute

    rng = np.random.default_rng(0)
    train = [music.piano_roll(c) for c in chorales["train"]]
    cases = [(train, None, None), (train, None, 32), (train, 200, 50)]
    for _ in range(20):
        lengths = rng.integers(0, 30, size=rng.integers(1, 8))
        rolls = [np.zeros((int(n), 88), "float32") for n in lengths]
        steps = None if rng.random() < 0.5 else int(max(lengths.max(), 1) + rng.integers(0, 5))
        cases.append((rolls, steps, None if rng.random() < 0.3 else int(rng.integers(1, 12))))
    for rolls, steps, window in cases:
        built = len(music._examples(rolls, steps, window)[0])
        for batch_size, replicas in ((16, 1), (3, 2), (1, 1)):
            counted = music.training_batches(rolls, batch_size, steps, window, replicas)
            assert counted == distribute.even_batch_count(built, batch_size, replicas), (steps, window)
    with pytest.raises(ValueError, match="more than steps"):
        music.training_batches(train, steps=10)
    with pytest.raises(ValueError, match="window"):
        music.training_batches(train, window=0)


def test_masked_nll_ignores_padding():
    rng = np.random.default_rng(0)
    y = (rng.uniform(size=(2, 4, 88)) < 0.1).astype("float32")
    logits = rng.normal(size=(2, 4, 88)).astype("float32")
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 0]], "float32")
    loss = music.PianoRollNLL()
    base = float(loss(y, logits, sample_weight=mask))
    garbage_y, garbage_logits = y.copy(), logits.copy()
    garbage_y[mask == 0] = 1.0
    garbage_logits[mask == 0] = -50.0
    assert float(loss(garbage_y, garbage_logits, sample_weight=mask)) == pytest.approx(base, rel=1e-5)
    per_key = np.logaddexp(0, -logits) * y + np.logaddexp(0, logits) * (1 - y)
    expected = (per_key.sum(-1) * mask).sum() / mask.sum()
    assert base == pytest.approx(expected, rel=1e-4)



def test_nll_per_step_metric_weighs_batches_by_their_real_steps():
    # The loss is each batch's NLL per real step; Keras' reported loss averages the
    # batches by their numbers of sequences. The metric sums and counts real steps.
    rng = np.random.default_rng(1)
    y = (rng.uniform(size=(3, 4, 88)) < 0.1).astype("float32")
    logits = rng.normal(size=(3, 4, 88)).astype("float32")
    mask = np.array([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]], "float32")
    per_step = (np.logaddexp(0, -logits) * y + np.logaddexp(0, logits) * (1 - y)).sum(-1)
    metric = music.PianoRollNLLPerStep()
    garbage = np.where(mask[..., None] > 0, logits, np.inf)  # padded steps' values never count
    for batch in (slice(0, 2), slice(2, 3)):
        metric.update_state(y[batch], garbage[batch], sample_weight=mask[batch])
    exact = (per_step * mask).sum() / mask.sum()
    assert float(metric.result()) == pytest.approx(exact, rel=1e-5)
    by_sequences = (2 * float(music.PianoRollNLL()(y[:2], logits[:2], sample_weight=mask[:2]))
                    + float(music.PianoRollNLL()(y[2:], logits[2:], sample_weight=mask[2:]))) / 3
    assert abs(by_sequences - exact) > 1e-3  # what val_loss reports differs
    metric.reset_state()
    metric.update_state(y, logits)  # no sample weight: every step counts
    assert float(metric.result()) == pytest.approx(per_step.mean(), rel=1e-5)
    assert music.PianoRollNLLPerStep.from_config(metric.get_config()).name == "nll_per_step"

def test_nll_per_step_metric_takes_a_weight_per_sequence_as_the_loss_does():
    # A weight per sequence [batch] (or [batch, steps, 1]) weighs every step of its
    # sequence, as Keras' losses and metrics read it (the rank of the weights is
    # aligned with the values' from the left): it was broadcast against the steps axis
    # instead (3 sequences of 3 steps: step 1 of every sequence left out, silently) or
    # refused by broadcast_to.
    rng = np.random.default_rng(2)
    y = (rng.uniform(size=(3, 3, 88)) < 0.1).astype("float32")
    logits = rng.normal(size=(3, 3, 88)).astype("float32")
    per_step = (np.logaddexp(0, -logits) * y + np.logaddexp(0, logits) * (1 - y)).sum(-1)
    weights = np.array([1.0, 0.0, 2.0], "float32")
    expected = (per_step * weights[:, None]).sum() / (3 * weights.sum())
    for sample_weight in (weights, weights[:, None] * np.ones((3, 3), "float32"),
                          weights[:, None, None] * np.ones((3, 3, 1), "float32")):
        metric = music.PianoRollNLLPerStep()
        metric.update_state(y, logits, sample_weight=sample_weight)
        assert float(metric.result()) == pytest.approx(expected, rel=1e-5)


def test_nll_per_step_matches_the_loss_and_any_length(tmp_path):
    rolls = [music.piano_roll([[60], [62, 64], [], [67]]), music.piano_roll([[48, 55]])]
    model = music.build_model(steps=2, **TINY)  # shorter than the rolls: layers reused
    value = music.nll_per_step(model, rolls)
    inputs, targets, mask = music.next_step_arrays(rolls)
    big = music.build_model(steps=4, **TINY)
    big.set_weights(model.get_weights())
    expected = float(music.PianoRollNLL()(targets, big(inputs), sample_weight=mask))
    assert value == pytest.approx(expected, rel=1e-4)
    assert value == pytest.approx(88 * np.log(2), rel=0.2)  # near chance at initialization


@pytest.mark.parametrize("use_decoder", [True, False])
def test_model_trains_a_step_and_round_trips(tmp_path, chorales, use_decoder):
    rolls = _short_rolls(chorales, "valid")
    model = music.compile_model(music.build_model(4, use_decoder=use_decoder, input_dropout=0.1, **TINY))
    ds = music.make_dataset(rolls, batch_size=4, window=4)
    model.fit(ds.take(1), epochs=1, verbose=0)
    path = tmp_path / "music.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    x = next(iter(ds))[0]
    np.testing.assert_allclose(loaded(x), model(x), atol=1e-5)
    assert music.nll_per_step(loaded, rolls) == pytest.approx(music.nll_per_step(model, rolls), rel=1e-5)


@pytest.mark.graph_mode  # graph mode: eager took longer (many steps)
def test_learns_something(chorales):
    rolls = [music.piano_roll(c) for c in chorales["train"][:16]]
    model = music.compile_model(music.build_model(8, units=(16, 8)), learning_rate=2e-2)
    ds = music.make_dataset(rolls, 64, window=8)
    before = model.evaluate(ds, verbose=0, return_dict=True)["nll_per_step"]
    model.fit(ds, epochs=12, verbose=0)
    after = model.evaluate(ds, verbose=0, return_dict=True)["nll_per_step"]
    # chance is 88 log 2 = 61 nats per step; the key frequencies alone bring it far below
    assert after < 0.5 * before, (before, after)
    # ... to the NLL of the best history-blind model, one Bernoulli per key at its
    # frequency in these targets (10.94 nats): the model must use the past. A model
    # that never sees its input stops at 11.03-11.05 (seeds 0-2); this one reaches 9.80-9.96.
    targets = np.concatenate([y.numpy()[m.numpy() > 0] for _, y, m in ds])
    p = np.clip(targets.mean(axis=0), 1e-7, 1 - 1e-7)
    blind = -np.mean(np.sum(targets * np.log(p) + (1 - targets) * np.log(1 - p), axis=-1))
    assert after < blind - 0.5, (blind, after)


def test_transpose_roll_moves_notes_and_refuses_to_leave_the_keyboard():
    roll = music.piano_roll([[21, 60], [64], []])
    up = music.transpose_roll(roll, 3)
    assert sorted(np.flatnonzero(up[0]) + 21) == [24, 63] and np.flatnonzero(up[1]).tolist() == [64 + 3 - 21]
    assert up.sum() == roll.sum() and up[2].sum() == 0
    np.testing.assert_array_equal(music.transpose_roll(up, -3), roll)
    with pytest.raises(ValueError, match="off the piano"):
        music.transpose_roll(roll, -1)  # A0 has no key below it
    with pytest.raises(ValueError, match="off the piano"):
        music.transpose_roll(music.piano_roll([[108]]), 1)
    with pytest.raises(ValueError, match="semitones"):
        music.transpose_roll(roll, 1.5)


def _keys(a):
    return np.flatnonzero(a.reshape(-1, 88).max(axis=0))


def test_random_transposition_keeps_notes_on_the_keyboard_and_shifts_inputs_with_targets():
    rng = np.random.default_rng(0)
    # notes near both ends of the keyboard, in the middle, and a window without notes
    chorales = [[[22], [23, 30]], [[100], [107, 108]], [[60, 64], [67]], [[]]]
    rolls = [music.piano_roll(c) for c in chorales] * 50
    order = rng.permutation(len(rolls))
    rolls = [rolls[i] for i in order]
    plain = music.make_dataset(rolls, batch_size=len(rolls))
    moved = music.make_dataset(rolls, batch_size=len(rolls), transpose=5, seed=3)
    (x0, y0, m0), = [tuple(t.numpy() for t in b) for b in plain]
    epochs = [[tuple(t.numpy() for t in b) for b in moved][0] for _ in range(2)]
    shifts = []
    for x, y, m in epochs:
        np.testing.assert_array_equal(m, m0)
        assert set(np.unique(y)) <= {0.0, 1.0}
        np.testing.assert_array_equal(x.sum(axis=(1, 2)), x0.sum(axis=(1, 2)))  # no note lost
        np.testing.assert_array_equal(y.sum(axis=(1, 2)), y0.sum(axis=(1, 2)))
        for i in range(len(rolls)):
            if y0[i].sum() == 0:
                np.testing.assert_array_equal(y[i], 0)
                continue
            shift = _keys(y[i])[0] - _keys(y0[i])[0]
            assert -5 <= shift <= 5
            # inputs and targets moved together, by the same amount, notes kept in order
            np.testing.assert_array_equal(y[i], music.transpose_roll(y0[i], int(shift)))
            np.testing.assert_array_equal(x[i], music.transpose_roll(x0[i], int(shift)))
            shifts.append((order[i] % 4, shift))
    by_kind = {k: {s for kind, s in shifts if kind == k} for k in range(3)}
    assert by_kind[0] == {-1, 0, 1, 2, 3, 4, 5}  # key 22 (index 1) can go down one key only
    assert by_kind[1] == {-5, -4, -3, -2, -1, 0}  # key 108 is the top of the keyboard
    assert by_kind[2] == set(range(-5, 6))
    assert not np.array_equal(epochs[0][1], epochs[1][1])  # new draws every epoch
    for bad in (-1, 88, 2.5, True):
        with pytest.raises(ValueError, match="transpose"):
            music.make_dataset(rolls, transpose=bad)


def test_optimizer_options_and_their_validation():
    model = music.build_model(4, **TINY)
    opt = music.compile_model(model, weight_decay=1e-4, ema_momentum=0.9).optimizer
    assert isinstance(opt, keras.optimizers.AdamW) and opt.weight_decay == pytest.approx(1e-4)
    assert opt.use_ema and opt.ema_momentum == pytest.approx(0.9)
    opt = music.compile_model(model).optimizer
    assert type(opt) is keras.optimizers.Adam and not opt.use_ema
    with pytest.raises(ValueError, match="weight_decay"):
        music.compile_model(model, weight_decay=-1.0)
    for bad in (1.0, -0.1, "0.9"):
        with pytest.raises(ValueError, match="ema_momentum"):
            music.compile_model(model, ema_momentum=bad)
    # audit (2026-11-27): a NaN rate gave NaN weights after one step, a negative one
    # trained uphill, a NaN clipnorm was accepted
    for name, bad in [("learning_rate", float("nan")), ("learning_rate", -1.0), ("learning_rate", 0),
                      ("clipnorm", float("nan")), ("clipnorm", 0.0), ("weight_decay", float("inf"))]:
        with pytest.raises(ValueError, match=rf"Received: {name}={bad!r}"):
            music.compile_model(model, **{name: bad})
    schedule = keras.optimizers.schedules.ExponentialDecay(1e-3, 10, 0.5)
    assert music.compile_model(model, schedule, clipnorm=None).optimizer.clipnorm is None


def test_compile_model_takes_a_numpy_ema_momentum():
    # (int, float) refused np.float32(0.9), which RAdam and Keras' optimizers take; the
    # optimizer gets a Python float
    model = music.build_model(4, **TINY)
    opt = music.compile_model(model, ema_momentum=np.float32(0.9)).optimizer
    assert opt.use_ema and type(opt.ema_momentum) is float and opt.ema_momentum == pytest.approx(0.9)
    for bad in (float("nan"), float("inf"), np.float32(1.0), True):
        with pytest.raises(InputError, match=r"^`ema_momentum` must be None or in \[0, 1\)\. Received: ema_momentum="):
            music.compile_model(model, ema_momentum=bad)


def test_train_takes_a_numpy_reduce_lr_factor(tmp_path):
    # (int, float) refused np.float32(0.5). The empty `readout`, checked right after the
    # factor, stops the call before anything trains: its error shows the factor was taken.
    with pytest.raises(InputError, match=r"Received: readout=\[\]"):
        music.train(DATA, run_dir=str(tmp_path / "run"), epochs=1, limit=1, reduce_lr_factor=np.float32(0.5),
                    readout=[])
    with pytest.raises(InputError, match="Received: reduce_lr_factor="):
        music.train(DATA, run_dir=str(tmp_path / "run"), epochs=1, limit=1, reduce_lr_factor=np.float32(1.0))


def test_train_and_evaluate_take_numpy_integers(tmp_path):
    # isinstance(x, int) refused np.int64 (a tuner's or an array's) for these counts. The
    # empty `readout`, checked after them, stops train before anything trains; evaluate
    # stops at the missing model, after its sample_steps.
    with pytest.raises(InputError, match=r"Received: readout=\[\]"):
        music.train(DATA, run_dir=str(tmp_path / "run"), epochs=1, limit=1, reduce_lr_patience=np.int64(2),
                    sample_steps=np.int64(0), ensemble=np.int32(2), readout=[])
    with pytest.raises(PathNotFoundError, match="no model at"):
        music.evaluate(str(tmp_path / "missing.keras"), DATA, sample_steps=np.int64(2))
    for name, bad in (("reduce_lr_patience", np.int64(0)), ("ensemble", np.int64(0)), ("sample_steps", np.int64(-1))):
        with pytest.raises(InputError, match=f"Received: {name}="):
            music.train(DATA, run_dir=str(tmp_path / "run"), epochs=1, limit=1, **{name: bad})


def test_music_imports_no_private_name_of_keras_capsules():
    # It imported _like_values and _require_known_ranks from keras_capsules.losses; the
    # checks shared by the package and the applications live in keras_capsules._validation.
    import ast

    with open(music.__file__, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    private = [f"{node.module}.{alias.name}" for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keras_capsules")
               for alias in node.names if alias.name.startswith("_")]
    assert private == []


def test_build_model_refuses_bad_steps_and_output_biases():
    # audit (2026-11-27): steps=0 failed only when the model was called; an output bias of
    # the wrong length failed in numpy's reshape, and a NaN one gave NaN logits silently
    with pytest.raises(ValueError, match="Received: steps=0"):
        music.build_model(0, **TINY)
    for bad, shown in [(np.zeros(3), r"shape \(3,\)"), (np.full(88, np.nan), r"shape \(88,\) with non-finite")]:
        with pytest.raises(ValueError, match=rf"`output_bias` must be 88 finite numbers.*Received: output_bias of {shown}"):
            music.build_model(4, output_bias=bad, **TINY)
    model = music.build_model(4, output_bias=np.linspace(-1, 1, 88), **TINY)
    np.testing.assert_allclose(model.get_layer("rladder").output_bias, np.linspace(-1, 1, 88), rtol=1e-6)


def test_the_hierarchical_baseline_takes_the_nade_readout():
    # audit (2026-11-27): without the decoder, the read-out's Dense layer was bound to the
    # name `readout`, so readout="nade" was silently dropped (and train() fed the model
    # inputs it did not take)
    model = music.build_model(4, use_decoder=False, readout="nade", **TINY)
    assert music.is_autoregressive(model) and set(model.input) == {"rolls", "targets"}
    assert model.get_layer("nade") is not None and model.get_layer("readout") is not None
    plain = music.build_model(4, use_decoder=False, **TINY)
    assert not music.is_autoregressive(plain)


def test_command_line_options_reach_train(monkeypatch):
    import argparse

    parser = argparse.ArgumentParser()
    music.add_arguments(parser, "train")
    args = parser.parse_args(["--transpose", "3", "--weight-decay", "0.01", "--ema-momentum", "0.99",
                              "--reduce-lr-patience", "4", "--reduce-lr-factor", "0.3"])
    assert (args.transpose, args.weight_decay, args.ema_momentum) == (3, 0.01, 0.99)
    defaults = parser.parse_args([])
    assert (defaults.transpose, defaults.weight_decay, defaults.ema_momentum) == (0, 0.0, None)
    for bad in (["--transpose", "-1"], ["--reduce-lr-patience", "0"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
    seen = {}
    monkeypatch.setattr(music, "train", lambda *a, **kw: seen.update(kw))
    monkeypatch.setattr("applications.arguments.train_options", lambda args, strategy: {})
    args.data_dir = args.limit = None
    music.run_train(args, None)
    assert (seen["transpose"], seen["weight_decay"], seen["ema_momentum"]) == (3, 0.01, 0.99)
    assert (seen["reduce_lr_patience"], seen["reduce_lr_factor"]) == (4, 0.3)


@pytest.mark.parametrize("option, bad", [("--weight-decay", "inf"), ("--weight-decay", "-1"),
                                         ("--ema-momentum", "1.5"), ("--reduce-lr-factor", "2"),
                                         ("--dropout", "1"), ("--zoneout", "-0.1"), ("--dropout", "nan")])
def test_bad_rates_are_usage_errors(option, bad, capsys):
    # these were plain floats: refused only after the data was read (an empty run directory
    # left behind), and --weight-decay inf was accepted and trained to NaN
    import argparse

    parser = argparse.ArgumentParser(prog="keras-capsules")
    music.add_arguments(parser, "train")
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args([option, bad])
    assert exit_info.value.code == 2 and option in capsys.readouterr().err
    assert parser.parse_args([option, "0.5"]) is not None
    with pytest.raises(ValueError, match="weight_decay"):
        music.compile_model(music.build_model(4, **TINY), weight_decay=float("inf"))


def test_train_with_transposition_weight_decay_and_moving_average(tmp_path, short_data):
    result = music.train(short_data, run_dir=str(tmp_path), epochs=2, batch_size=4, window=4, limit=3,
                         transpose=2, weight_decay=1e-3, ema_momentum=0.5, verbose=0, **TINY)
    assert result["epochs_run"] == 2 and np.isfinite(result["test_nll_per_step"])
    assert result["sample_plot"] == str(tmp_path / "sample.png")  # a sampled chorale, 64 steps by default
    assert (tmp_path / "sample.png").stat().st_size > 1000
    rolls, _ = music.load_rolls(short_data, limit=3)
    saved = keras.saving.load_model(result["model"])
    assert music.nll_per_step(saved, rolls["valid"]) == pytest.approx(result["valid_nll_per_step"], rel=1e-5)
    # evaluate scores the chorales train scored: those of short_data, not the shared copy's
    scored = music.evaluate(result["model"])["test_nll_per_step"]
    assert scored == pytest.approx(result["test_nll_per_step"], rel=1e-5)


def test_evaluate_refuses_another_chorales_file_where_the_runs_was(tmp_path, capsys):
    # evaluate read the recorded data_path whatever it held since: another chorales file
    # there was scored silently as the run's test chorales. metrics.json records the file's
    # fingerprint now: the same file moved and given is the run's; another one given
    # elsewhere is the user's choice, scored with a note.
    import os

    from applications.shared_data import files_fingerprint
    from tests.applications.short_data import SHORT_LENGTHS

    first = write_short_chorales(tmp_path / "first")
    result = music.train(str(first), run_dir=str(tmp_path / "run"), epochs=1, batch_size=4, window=2, limit=2,
                         sample_steps=0, verbose=0, **TINY)
    model, metrics_path = result["model"], tmp_path / "run" / "metrics.json"
    assert json.loads(metrics_path.read_text())["data_fingerprint"] == files_fingerprint(
        "JSB Chorales", first, [first])  # (read in the file, not its folder: 2026-12-06)
    os.rename(first.parent, tmp_path / "moved")
    scored = music.evaluate(model, str(tmp_path / "moved"))["test_nll_per_step"]
    assert scored == pytest.approx(result["test_nll_per_step"], rel=1e-5) and capsys.readouterr().err == ""
    other = write_short_chorales(tmp_path / "first", {**SHORT_LENGTHS, "test": (8, 12, 6, 11)})
    for data_path in (None, str(other)):
        with pytest.raises(InputError, match=re.escape(
                f"the model in {tmp_path / 'run'} was trained and tested on JSB Chorales in {other}; "
                f"{other} now holds other data (JSB Chorales, where jsb_chorales.json differs): put the "
                "run's data back there")):
            music.evaluate(model, data_path)
    elsewhere = write_short_chorales(tmp_path / "else", {**SHORT_LENGTHS, "test": (8, 12, 6, 11)})
    assert np.isfinite(music.evaluate(model, str(elsewhere))["test_nll_per_step"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"note: JSB Chorales in {elsewhere} are not the data "), err
    metrics = json.loads(metrics_path.read_text())  # a record of an older version: evaluated as before
    del metrics["data_fingerprint"]
    metrics_path.write_text(json.dumps(metrics))
    assert np.isfinite(music.evaluate(model)["test_nll_per_step"])


@pytest.mark.parametrize("bad, name", [(dict(reduce_lr_patience=0), "reduce_lr_patience"),
                                       (dict(reduce_lr_patience=2.0), "reduce_lr_patience"),
                                       (dict(reduce_lr_patience=2, reduce_lr_factor=1.0), "reduce_lr_factor"),
                                       (dict(reduce_lr_factor=0), "reduce_lr_factor")])
def test_train_refuses_bad_learning_rate_schedules(tmp_path, bad, name):
    with pytest.raises(ValueError, match=name):
        music.train(DATA, run_dir=str(tmp_path), epochs=1, limit=1, **bad)


def test_reduce_lr_on_plateau_lowers_the_learning_rate(tmp_path, short_data):
    seen = []

    class Record(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    # a learning rate far too high: the validation loss stops improving, the rate is halved
    music.train(short_data, run_dir=str(tmp_path), epochs=4, batch_size=4, window=4, limit=2, learning_rate=5.0,
                reduce_lr_patience=1, reduce_lr_factor=0.5, verbose=0, callbacks=[Record()], **TINY)
    assert seen[0] == pytest.approx(5.0) and min(seen) <= 2.5 and all(b <= a for a, b in zip(seen, seen[1:]))


def test_dropout_between_levels_only_in_training_and_round_trips(tmp_path):
    rng = np.random.default_rng(1)
    x = (rng.uniform(size=(3, 6, 88)) < 0.1).astype("float32")
    for noise in ("step", "sequence"):
        model = music.build_model(6, dropout=0.5, dropout_noise=noise, seed=2, **TINY)
        plain = music.build_model(6, **TINY)
        plain.set_weights(model.get_weights())
        np.testing.assert_allclose(model(x, training=False), plain(x), atol=1e-6)  # inference: no dropout
        a, b = model(x, training=True), model(x, training=True)
        assert not np.allclose(a, b) and not np.allclose(a, plain(x))  # training: new masks every call
        path = tmp_path / f"{noise}.keras"
        model.save(path)
        loaded = keras.saving.load_model(path)
        rladder = loaded.get_layer("rladder")
        assert (rladder.dropout, rladder.dropout_noise) == (0.5, noise)
        np.testing.assert_allclose(loaded(x), model(x), atol=1e-5)
    with pytest.raises(ValueError, match="dropout"):
        music.build_model(4, dropout=1.0, **TINY)
    with pytest.raises(ValueError, match="dropout_noise"):
        music.build_model(4, dropout=0.1, dropout_noise="time", **TINY)


def test_sequence_dropout_keeps_its_masks_over_time():
    from keras_capsules.layers import RLadder, level_spec

    ladder = RLadder([level_spec("gated", 8)], dropout=0.5, dropout_noise="sequence", seed=0)
    x = np.ones((4, 5, 6), "float32")
    ladder(x)
    drop = ladder._dropper(4, "float32")
    v = np.ones((4, 8), "float32")
    first, again = np.asarray(drop(("e", 0), v)), np.asarray(drop(("e", 0), 3 * v))
    np.testing.assert_allclose(again, 3 * first)  # the same mask at every step
    assert set(np.unique(first)) <= {0.0, 2.0} and 0 < (first == 0).mean() < 1


def test_output_bias_starts_at_the_key_log_odds():
    rolls = [music.piano_roll([[60], [60, 64], [64]]), music.piano_roll([[60]])]
    odds = music.key_log_odds(rolls)
    assert odds.shape == (88,)
    assert odds[60 - 21] == pytest.approx(np.log((3 + 1) / (1 + 1)))  # on at 3 of 4 steps
    assert odds[64 - 21] == pytest.approx(np.log((2 + 1) / (2 + 1)))
    assert odds[0] == pytest.approx(np.log(1 / 5))
    for use_decoder in (True, False):
        model = music.build_model(3, use_decoder=use_decoder, output_bias=odds, **TINY)
        bias = [w for w in model.weights if w.path.endswith("output_bias") or w.path.endswith("readout/bias")]
        np.testing.assert_allclose(bias[0], odds)


def test_ensemble_averages_the_probabilities():
    rolls = [music.piano_roll([[60], [62, 64], [], [67]]), music.piano_roll([[48, 55]])]
    a, b = music.build_model(4, **TINY), music.build_model(4, **TINY)
    inputs, targets, mask = music.next_step_arrays(rolls)
    p = (keras.ops.sigmoid(a(inputs)) + keras.ops.sigmoid(b(inputs))) / 2
    p = np.asarray(p, "float64")
    per_step = -(targets * np.log(p) + (1 - targets) * np.log(1 - p)).sum(-1)
    expected = (per_step * mask).sum() / mask.sum()
    assert music.nll_per_step([a, b], rolls) == pytest.approx(expected, rel=1e-5)
    assert music.nll_per_step([a], rolls) == pytest.approx(music.nll_per_step(a, rolls), rel=1e-6)


def test_train_an_ensemble_with_dropout_and_output_bias(tmp_path, short_data, ensemble_run):
    # (the run of the ensemble_run fixture: a gated and an LSTM member, with dropout,
    # zoneout and the output bias at the key log-odds)
    run_dir, result, budgets = ensemble_run
    assert budgets == [0, 1] and result["epochs_run"] == [1, 1]
    rolls, _ = music.load_rolls(short_data, limit=3)
    members = [keras.saving.load_model(run_dir / name) for name in ("model.keras", "model_1.keras")]
    assert [m.get_layer("rladder").levels[0]["encoder"] for m in members] == ["gated", "lstm"]
    assert music.nll_per_step(members, rolls["test"]) == pytest.approx(result["test_nll_per_step"], rel=1e-5)
    # the member files, for `evaluate` of model.keras (test_evaluate_of_an_ensemble_run_scores_...)
    assert json.loads((run_dir / "metrics.json").read_text())["members"] == ["model.keras", "model_1.keras"]
    with pytest.raises(ValueError, match="ensemble"):
        music.train(DATA, run_dir=str(tmp_path), epochs=1, limit=1, ensemble=0)


def test_zoneout_of_the_encoder_states(tmp_path):
    from keras_capsules.layers import RLadder, level_spec

    rng = np.random.default_rng(2)
    x = (rng.uniform(size=(3, 6, 88)) < 0.1).astype("float32")
    model = music.build_model(6, zoneout=0.3, seed=1, **TINY)
    a, b = model(x, training=True), model(x, training=True)
    assert not np.allclose(a, b)  # new masks every call
    np.testing.assert_allclose(model(x), model(x))  # inference is deterministic
    path = tmp_path / "zoneout.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_layer("rladder").zoneout == pytest.approx(0.3)
    np.testing.assert_allclose(loaded(x), model(x), atol=1e-5)
    # one level, no decoder: at inference the state is the expectation of the zoned updates
    ladder = RLadder([level_spec("gated", 4)], use_decoder=False, zoneout=0.25)
    plain = RLadder([level_spec("gated", 4)], use_decoder=False)
    seq = rng.normal(size=(2, 3, 5)).astype("float32")
    ladder(seq), plain(seq)
    plain.set_weights(ladder.get_weights())
    cell = plain.encoders[0]
    h = np.zeros((2, 4), "float32")
    for t in range(3):
        h_new = np.asarray(cell([seq[:, t], h]))
        h = 0.25 * h + 0.75 * h_new
    np.testing.assert_allclose(np.asarray(ladder(seq))[:, -1], h, atol=1e-5)
    with pytest.raises(ValueError, match="zoneout"):
        music.build_model(4, zoneout=-0.1, **TINY)


def _nade_probability(layer, z, rolls):
    """p(roll) of every roll in ``rolls`` [n, keys] under ``layer`` given logits ``z`` [keys]."""
    logits = np.asarray(layer([np.repeat(z[None], len(rolls), 0), rolls]), "float64")
    return np.prod(np.where(rolls > 0, 1 / (1 + np.exp(-logits)), 1 / (1 + np.exp(logits))), axis=-1)


def test_key_nade_is_a_normalized_autoregressive_distribution():
    import itertools

    rng = np.random.default_rng(3)
    layer = music.KeyNADE(5, output_initializer="glorot_uniform")
    z = rng.normal(size=4).astype("float32")
    rolls = np.array(list(itertools.product([0.0, 1.0], repeat=4)), "float32")
    p = _nade_probability(layer, z, rolls)
    assert p.sum() == pytest.approx(1.0, abs=1e-5)  # a distribution over all 2^4 rolls
    # not the independent one: the keys depend on each other
    marginals = [(p * rolls[:, j]).sum() for j in range(4)]
    independent = np.prod(np.where(rolls > 0, marginals, 1 - np.asarray(marginals)), axis=-1)
    assert np.abs(p - independent).max() > 1e-3
    # key j's logit depends on the keys below it only
    y = rng.integers(0, 2, (1, 4)).astype("float32")
    base = np.asarray(layer([z[None], y]))
    for j in range(4):
        flipped = y.copy()
        flipped[0, j] = 1 - flipped[0, j]
        changed = np.abs(np.asarray(layer([z[None], flipped])) - base)[0] > 1e-7
        assert not changed[: j + 1].any() and (j == 3 or changed[j + 1 :].all())
    # with V at zero (the default start) the logits are the independent read-out's
    np.testing.assert_allclose(music.KeyNADE(3)([z[None], y]), z[None], atol=1e-6)


def test_key_nade_layer_contract(tmp_path):
    from tests.harness import run_layer_contract

    rng = np.random.default_rng(4)
    z = rng.normal(size=(2, 3, 6)).astype("float32")
    y = (rng.uniform(size=(2, 3, 6)) < 0.3).astype("float32")
    run_layer_contract(music.KeyNADE, dict(hidden_units=4, output_initializer="glorot_uniform"), [z, y],
                       tmp_path=tmp_path)


def test_key_nade_refuses_bad_arguments():
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="hidden_units"):
            music.KeyNADE(bad)
    with pytest.raises(ValueError, match="same known last axis"):
        music.KeyNADE(2)([np.zeros((1, 4), "float32"), np.zeros((1, 5), "float32")])
    with pytest.raises(ValueError, match="readout"):
        music.build_model(4, readout="rbm", **TINY)


def test_nade_readout_trains_round_trips_and_scores_whole_chorales(tmp_path, chorales):
    rolls = _short_rolls(chorales, "valid")
    model = music.compile_model(music.build_model(4, readout="nade", nade_units=6, **TINY), learning_rate=1e-2)
    assert music.is_autoregressive(model) and not music.is_autoregressive(music.build_model(4, **TINY))
    ds = music.make_dataset(rolls, batch_size=4, window=4, targets_as_input=True)
    model.fit(ds.take(2), epochs=2, verbose=0)
    assert np.abs(model.get_layer("nade").output_kernel.numpy()).max() > 0  # V left zero: it learned
    path = tmp_path / "nade.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    x = next(iter(ds))[0]
    np.testing.assert_allclose(loaded(x), model(x), atol=1e-5)
    # nll_per_step on whole chorales (longer than the 4 steps built for) is the loss of a
    # model built for their length with the same weights
    inputs, targets, mask = music.next_step_arrays(rolls)
    big = music.build_model(inputs.shape[1], readout="nade", nade_units=6, **TINY)
    big.set_weights(model.get_weights())
    expected = float(music.PianoRollNLL()(targets, big({"rolls": inputs, "targets": targets}), sample_weight=mask))
    assert music.nll_per_step(loaded, rolls) == pytest.approx(expected, rel=1e-4)


def test_an_ensemble_with_a_nade_member_mixes_whole_steps():
    rolls = [music.piano_roll([[60], [62, 64], [], [67]]), music.piano_roll([[48, 55]])]
    a = music.build_model(4, readout="nade", nade_units=3, **TINY)
    a.get_layer("nade").output_kernel.assign(np.random.default_rng(5).normal(size=(88, 3)))
    b = music.build_model(4, **TINY)
    inputs, targets, mask = music.next_step_arrays(rolls)

    def log_p(logits):
        logits = np.asarray(logits, "float64")
        return -(np.logaddexp(0, -logits) * targets + np.logaddexp(0, logits) * (1 - targets)).sum(-1)

    joint = np.logaddexp(log_p(a({"rolls": inputs, "targets": targets})), log_p(b(inputs))) - np.log(2)
    expected = -(joint * mask).sum() / mask.sum()
    assert music.nll_per_step([a, b], rolls) == pytest.approx(expected, rel=1e-5)


def _reference_step_log_probs(model, roll):
    """``[steps]`` log-probability of every step of one ``roll`` under ``model``, the
    straightforward way: its ladder (and NADE) layers called eagerly on that roll alone
    (its own length, no padding, no batch), the 88 keys' Bernoullis in float64 numpy."""
    roll = np.asarray(roll, "float32")[None]
    previous = np.concatenate([np.zeros_like(roll[:, :1]), roll[:, :-1]], axis=1)
    ladder = model.get_layer("rladder")
    if ladder.use_decoder:
        z = ladder(previous, training=False)[0]
    else:
        z = model.get_layer("readout")(ladder(previous, training=False))
    if music.is_autoregressive(model):
        z = model.get_layer("nade")([z, roll])
    z, y = np.asarray(z, "float64")[0], roll[0].astype("float64")
    p = 1 / (1 + np.exp(-z))
    return (y * np.log(p) + (1 - y) * np.log(1 - p)).sum(-1), p, y


@pytest.mark.graph_mode  # graph mode: it checks traced code
def test_nll_per_step_of_real_chorales_is_that_of_each_chorale_alone_in_one_symbolic_trace(chorales, monkeypatch):
    # nll_per_step built a model unrolled over the longest roll and ran it eagerly, batch
    # after batch (seconds for a split, paid twice by every train and again by evaluate).
    # It now traces the ladder's symbolic loop once for all batches: the same numbers.
    from keras_capsules.layers import RLadder

    rng = np.random.default_rng(7)
    keras.utils.set_random_seed(7)
    gated = music.build_model(4, units=(8, 4))  # built for 4 steps: the chorales are longer
    nade = music.build_model(None, units=(6,), encoder="lstm", readout="nade", nade_units=5)
    hierarchical = music.build_model(4, units=(6, 4), encoder="lstm", use_decoder=False)
    models = (gated, nade, hierarchical)
    for model in models:  # logits far from 0, the NADE's V not zero
        model.set_weights([w + rng.normal(scale=0.3, size=w.shape).astype("float32") for w in model.get_weights()])
    rolls = [music.piano_roll(chorales["test"][i]) for i in (3, 4, 8, 10)]  # whole: 39, 32, 48 and 33 steps
    steps = sum(len(r) for r in rolls)
    alone = {id(m): [_reference_step_log_probs(m, r) for r in rolls] for m in models}

    def expected(members):
        refs = [alone[id(m)] for m in members]
        if any(music.is_autoregressive(m) for m in members):  # the mixture of the whole steps' distributions
            log_p = np.stack([np.concatenate([lp for lp, _, _ in ref]) for ref in refs])
            top = log_p.max(axis=0)
            return -(top + np.log(np.mean(np.exp(log_p - top), axis=0))).sum() / steps
        p = np.mean([np.concatenate([p for _, p, _ in ref]) for ref in refs], axis=0)  # mean probabilities
        y = np.concatenate([y for _, _, y in refs[0]])
        return -(y * np.log(p) + (1 - y) * np.log(1 - p)).sum() / steps

    cases = [[gated], [nade], [hierarchical], [gated, hierarchical], [gated, nade, hierarchical]]
    lengths_seen = []
    original = RLadder.call

    def recording_call(self, inputs, *args, **kwargs):
        lengths_seen.append(inputs.shape[1])
        return original(self, inputs, *args, **kwargs)

    monkeypatch.setattr(RLadder, "call", recording_call)
    for members in cases:
        lengths_seen.clear()
        # batches of 3: the last one of a single chorale
        assert music.nll_per_step(members, rolls, batch_size=3) == pytest.approx(expected(members), rel=1e-6)
        # every ladder ran once, traced on sequences of unknown length (its symbolic loop)
        # for all the batches; the unrolled model ran each batch of 48 steps eagerly
        assert lengths_seen == [None] * len(members), lengths_seen


def test_train_with_the_nade_readout_from_the_command_line(tmp_path, monkeypatch, short_data, ensemble_run):
    import argparse

    parser = argparse.ArgumentParser()
    music.add_arguments(parser, "train")
    args = parser.parse_args(["--readout", "nade", "--nade-units", "7"])
    assert (args.readout, args.nade_units) == ("nade", 7)
    assert parser.parse_args([]).readout == "independent"
    with pytest.raises(SystemExit):
        parser.parse_args(["--readout", "rbm"])
    # train's readout=["nade", "independent"], nade_units=4: the run of the ensemble_run fixture
    run_dir, result, _ = ensemble_run
    members = [keras.saving.load_model(run_dir / name) for name in ("model.keras", "model_1.keras")]
    assert [music.is_autoregressive(m) for m in members] == [True, False]
    rolls, _ = music.load_rolls(short_data, limit=3)
    assert music.nll_per_step(members, rolls["test"]) == pytest.approx(result["test_nll_per_step"], rel=1e-5)
    with pytest.raises(ValueError, match="readout"):
        music.train(DATA, run_dir=str(tmp_path), epochs=1, limit=1, readout="rbm")


# ------------------------------------------------------------------------- sampling
def _all_rolls(keys):
    import itertools

    return np.array(list(itertools.product([0.0, 1.0], repeat=keys)), "float32")


def _empirical(draws, rolls):
    """The frequency of every roll of ``rolls`` among ``draws``."""
    codes = draws.astype("int64") @ (2 ** np.arange(draws.shape[1])[::-1])
    return np.bincount(codes, minlength=len(rolls)) / len(draws)


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_sample_keys_draws_the_nade_distribution_of_whole_rolls(temperature):
    rng = np.random.default_rng(6)
    layer = music.KeyNADE(5, output_initializer="glorot_uniform")
    z = rng.normal(size=4).astype("float32")
    rolls = _all_rolls(4)  # row i is the binary code of i, lowest key first
    layer([z[None], rolls[:1]])
    layer.output_kernel.assign(4.0 * np.asarray(layer.output_kernel))  # strong dependencies between keys
    logits = np.asarray(layer([np.repeat(z[None], len(rolls), 0), rolls]), "float64") / temperature
    exact = np.prod(np.where(rolls > 0, 1 / (1 + np.exp(-logits)), 1 / (1 + np.exp(logits))), axis=-1)
    assert exact.sum() == pytest.approx(1.0, abs=1e-5)
    n = 40_000
    draws = music.sample_keys(np.repeat(z[None], n, 0), np.random.default_rng(0), layer, temperature)
    assert draws.shape == (n, 4) and draws.dtype == np.float32 and set(np.unique(draws)) <= {0.0, 1.0}
    np.testing.assert_allclose(_empirical(draws, rolls), exact, atol=5 * np.sqrt(0.25 / n))
    # the independent product of the same marginals is far from it: the test can tell
    marginals = draws.mean(axis=0)
    independent = np.prod(np.where(rolls > 0, marginals, 1 - marginals), axis=-1)
    assert np.abs(independent - exact).max() > 0.03 / temperature
    again = music.sample_keys(np.repeat(z[None], n, 0), np.random.default_rng(0), layer, temperature)
    np.testing.assert_array_equal(again, draws)


def test_sample_keys_independent_and_bad_arguments():
    z = np.array([[-2.0, 0.0, 1.5]] * 20_000)
    draws = music.sample_keys(z, np.random.default_rng(1))
    np.testing.assert_allclose(draws.mean(axis=0), 1 / (1 + np.exp(-z[0])), atol=0.02)
    for bad in (0, -1.0, "1", True):
        with pytest.raises(ValueError, match="temperature"):
            music.sample_keys(z, np.random.default_rng(1), temperature=bad)
    with pytest.raises(ValueError, match="logits"):
        music.sample_keys(z[0], np.random.default_rng(1))
    layer = music.KeyNADE(2)
    layer([np.zeros((1, 4), "float32")] * 2)
    with pytest.raises(ValueError, match="keys"):
        music.sample_keys(z, np.random.default_rng(1), layer)


def test_sample_of_an_independent_model_matches_its_sigmoids():
    model = music.build_model(4, **TINY)
    bias = model.get_layer("rladder").output_bias
    bias.assign(np.random.default_rng(7).uniform(-3, 3, 88).astype("float32"))
    n = 3000
    rolls = music.sample(model, 2, num_samples=n, seed=3)
    assert rolls.shape == (n, 2, 88) and rolls.dtype == np.float32 and set(np.unique(rolls)) <= {0.0, 1.0}
    first = 1 / (1 + np.exp(-np.asarray(model(np.zeros((1, 4, 88), "float32"))[0, 0], "float64")))
    np.testing.assert_allclose(rolls[:, 0].mean(axis=0), first, atol=0.04)  # 5 sigma at n = 3000
    # every roll of step 1 follows the model given the drawn roll of step 0: check the mean probability
    inputs = np.zeros((n, 4, 88), "float32")
    inputs[:, 1] = rolls[:, 0]
    second = 1 / (1 + np.exp(-np.asarray(model(inputs)[:, 1], "float64")))
    np.testing.assert_allclose(rolls[:, 1].mean(axis=0), second.mean(axis=0), atol=0.04)
    # deterministic for a seed, other seeds differ; a primer is continued
    np.testing.assert_array_equal(music.sample(model, 3, 2, seed=5), music.sample(model, 3, 2, seed=5))
    assert not np.array_equal(music.sample(model, 3, 2, seed=5), music.sample(model, 3, 2, seed=6))
    primer = music.piano_roll([[60, 64, 67], [62]])
    inputs = np.zeros((1, 4, 88), "float32")
    inputs[0, 1:3] = primer
    expected = 1 / (1 + np.exp(-np.asarray(model(inputs)[0, 2], "float64")))
    continued = music.sample(model, 1, num_samples=n, seed=4, primer=primer)
    np.testing.assert_allclose(continued[:, 0].mean(axis=0), expected, atol=0.04)


def test_sample_of_a_nade_model_draws_keys_given_the_lower_keys():
    model = music.build_model(4, readout="nade", nade_units=3, **TINY)
    model.get_layer("nade").output_kernel.assign(3 * np.random.default_rng(8).normal(size=(88, 3)))
    n = 4000
    rolls = music.sample(model, 1, num_samples=n, seed=2)[:, 0]
    zeros = np.zeros((1, 4, 88), "float32")

    def p_on(key, lower):
        targets = np.zeros((1, 4, 88), "float32")
        targets[0, 0, :key] = lower
        return float(1 / (1 + np.exp(-np.asarray(model({"rolls": zeros, "targets": targets})[0, 0, key]))))

    assert rolls[:, 0].mean() == pytest.approx(p_on(0, []), abs=0.04)
    for lower in ([0.0], [1.0]):  # key 1 given key 0, both ways
        chosen = rolls[:, 0] == lower[0]
        if chosen.sum() > 500:
            assert rolls[chosen, 1].mean() == pytest.approx(p_on(1, lower), abs=0.07)
    np.testing.assert_array_equal(music.sample(model, 3, 2, seed=1), music.sample(model, 3, 2, seed=1))


def test_sample_refuses_bad_arguments():
    model = music.build_model(2, **TINY)
    for name, bad in (("steps", 0), ("steps", 2.0), ("num_samples", 0), ("num_samples", True)):
        kwargs = {"steps": 2, "num_samples": 1, name: bad}
        with pytest.raises(ValueError, match=name):
            music.sample(model, **kwargs)
    with pytest.raises(ValueError, match="temperature"):
        music.sample(model, 2, temperature=0.0)
    with pytest.raises(ValueError, match="primer"):
        music.sample(model, 2, primer=np.zeros((3, 12), "float32"))
    with pytest.raises(ValueError, match="primer"):
        music.sample(model, 2, num_samples=2, primer=np.zeros((3, 1, 88), "float32"))
    for bad in (-1, 1.5):
        with pytest.raises(ValueError, match="sample_steps"):
            music.train(DATA, epochs=1, limit=1, sample_steps=bad)
        with pytest.raises(ValueError, match="sample_steps"):
            music.evaluate("missing.keras", DATA, sample_steps=bad)


def test_plot_piano_roll_writes_a_png(tmp_path):
    import matplotlib.image

    rolls = music.piano_roll([[60, 64, 67], [62], [], [21, 108]])
    path = music.plot_piano_roll(rolls, str(tmp_path / "roll.png"), title="a roll")
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    # the notes are drawn: the same figure without them differs, and only there
    silent = matplotlib.image.imread(music.plot_piano_roll(np.zeros_like(rolls), tmp_path / "silent.png", title="a roll"))
    assert silent.shape == image.shape and np.any(image[..., :3] < silent[..., :3] - 0.5)
    many = music.plot_piano_roll(np.stack([rolls, rolls]), tmp_path / "rolls.png")
    assert matplotlib.image.imread(many).shape[0] > image.shape[0]  # one panel per roll
    for bad in (np.zeros((4, 12)), np.zeros(88), np.zeros((0, 88)), np.zeros((1, 2, 3, 88))):
        with pytest.raises(ValueError, match="rolls"):
            music.plot_piano_roll(bad, tmp_path / "bad.png")
    # a short roll's title (train's for --sample-steps 4) is not cut off: the image is as wide as it
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    title = "a sampled chorale (4 steps, independent read-out)"
    short = matplotlib.image.imread(music.plot_piano_roll(rolls, tmp_path / "short.png", title=title))
    figure = Figure(dpi=100)
    needed = figure.text(0, 0, title, fontsize=9).get_window_extent(FigureCanvasAgg(figure).get_renderer()).width
    assert short.shape[1] >= needed


def test_evaluate_samples_from_the_command_line(tmp_path):
    import argparse

    model = music.build_model(4, readout="nade", nade_units=3, **TINY)
    path = tmp_path / "model.keras"
    model.save(path)
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    music.add_arguments(parser, "evaluate")
    args = parser.parse_args(["--limit", "2", "--sample-steps", "5", "--num-samples", "2", "--temperature", "0.5",
                              "--seed", "3"])
    args.model, args.data_dir = str(path), str(DATA)
    result = music.run_evaluate(args, None)
    assert np.isfinite(result["test_nll_per_step"]) and result["samples"] == str(tmp_path / "samples.npy")
    samples = np.load(result["samples"])
    assert samples.shape == (2, 5, 88)
    np.testing.assert_array_equal(samples, music.sample(model, 5, 2, seed=3, temperature=0.5))
    assert result["samples_plot"].endswith("samples.png") and (tmp_path / "samples.png").stat().st_size > 1000
    assert "samples" not in music.evaluate(str(path), DATA, limit=1)
    with pytest.raises(SystemExit):
        parser.parse_args(["--sample-steps", "-1"])



def test_evaluate_refuses_a_model_of_another_application(tmp_path):
    # another application's model failed deep in Keras ("incompatible with the layer"), and any
    # model taking 88-key rolls was scored as if it were a music model
    from applications.errors import CommandLineError

    digits = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(10)])
    rolls = keras.Sequential([keras.Input((4, 88)), keras.layers.Dense(88)])
    for i, model in enumerate((digits, rolls)):
        model.save(tmp_path / f"other{i}.keras")
        with pytest.raises(CommandLineError, match="is not a music model"):
            music.evaluate(str(tmp_path / f"other{i}.keras"), DATA, limit=1)


def test_evaluate_refuses_an_unknown_split_or_a_non_positive_limit(tmp_path):
    # split="validation" was a KeyError after loading the model; limit=-1 silently scored all
    # chorales but the last one (load_rolls refused it already).
    from applications.errors import InputError

    path = tmp_path / "model.keras"
    music.build_model(4, **TINY).save(path)
    with pytest.raises(InputError, match=r"Received: split='validation'"):
        music.evaluate(str(path), DATA, split="validation", limit=1)
    for bad in (0, -1):
        with pytest.raises(InputError, match=rf"Received: limit={bad}"):
            music.evaluate(str(path), DATA, limit=bad)
    assert np.isfinite(music.evaluate(str(path), DATA, split="valid", limit=1)["valid_nll_per_step"])


def test_train_refuses_empty_or_unknown_readouts_and_encoders_before_writing(tmp_path):
    # an empty readout or encoder list failed after the data was read with ZeroDivisionError,
    # and a bad readout only once the run directory had been made
    for bad in (dict(readout=[]), dict(readout=["nade", "mixture"]), dict(encoder=[])):
        with pytest.raises(ValueError, match="readout" if "readout" in bad else "encoder"):
            music.train(DATA, run_dir=str(tmp_path / "run"), epochs=1, limit=1, verbose=0, **bad)
        assert not (tmp_path / "run").exists()


def test_train_refuses_bad_model_and_optimizer_options_before_writing(tmp_path, monkeypatch):
    # The model's and the optimizer's options were checked where the first member was built, after
    # the run directory had been made: every refusal left an empty run directory behind. A bad
    # encoder of a later member failed only once the members before it had trained.
    built = []
    monkeypatch.setattr(keras.Model, "fit", lambda *args, **kwargs: built.append(args) or pytest.fail("trained"))
    for bad, match in (
        (dict(units=0), "units"),
        (dict(units=(4, "8")), "units"),
        (dict(encoder="convlstm"), "encoder"),
        (dict(encoder=["gated", "conv"], ensemble=2), "encoder"),
        (dict(learning_rate=0), "learning_rate"),
        (dict(weight_decay=-1.0), "weight_decay"),
        (dict(ema_momentum=1.5), "ema_momentum"),
        (dict(dropout=1.5), "dropout"),
        (dict(zoneout=-0.1), "zoneout"),
        (dict(dropout_noise="batch"), "dropout_noise"),
        (dict(input_dropout=1.0), "input_dropout"),
        (dict(nade_units=0, readout="nade"), "nade_units"),
        (dict(window=0), "window"),
        (dict(batch_size=0), "batch_size"),
        (dict(transpose=-1), "transpose"),
        (dict(seed=-1), "seed"),
        (dict(seed=1.5), "seed"),
        (dict(init_output_bias="False"), "init_output_bias"),
        (dict(use_decoder="False"), "use_decoder"),
        (dict(decoder_to_encoder="no"), "decoder_to_encoder"),
    ):
        with pytest.raises(ValueError, match=match):
            music.train(DATA, run_dir=str(tmp_path / "run"), epochs=1, limit=1, verbose=0, sample_steps=0,
                        **{**TINY, **bad})
        assert not (tmp_path / "run").exists(), bad
    assert not built


def test_build_model_refuses_convolutional_encoders_strings_as_booleans_and_negative_seeds():
    for bad, match in ((dict(encoder="convlstm"), "`encoder` must be one of"),
                       (dict(encoder=None), "`encoder` must be one of"),
                       (dict(use_decoder="False"), "`use_decoder` must be True or False"),
                       (dict(decoder_to_encoder=0), "`decoder_to_encoder` must be True or False"),
                       (dict(seed=-1, dropout=0.1), "`seed` must be an integer >= 0")):
        with pytest.raises(InputError, match=match):
            music.build_model(4, **{**TINY, **bad})
    with pytest.raises(InputError, match="encoder"):
        music.paper_levels((4,), encoder="conv")
    # numpy's booleans and seeds are taken
    model = music.build_model(4, **TINY, use_decoder=np.bool_(False), seed=np.int64(3), dropout=0.1)
    assert model.output.shape == (None, 4, 88)


def test_evaluate_refuses_bad_scoring_and_sampling_options_before_loading_the_model(tmp_path, monkeypatch):
    # they were refused only after the model had been loaded and the whole split scored
    music.build_model(4, **TINY).save(tmp_path / "model.keras")
    monkeypatch.setattr(music, "nll_per_step", lambda *args, **kwargs: pytest.fail("scored"))
    monkeypatch.setattr(music.checks, "load_model", lambda *args, **kwargs: pytest.fail("loaded"))
    for bad, match in ((dict(batch_size=0), "batch_size"),
                       (dict(sample_steps=2, num_samples=0), "num_samples"),
                       (dict(sample_steps=2, temperature=0), "temperature"),
                       (dict(sample_steps=2, seed=-1), "seed")):
        with pytest.raises(InputError, match=match):
            music.evaluate(str(tmp_path / "model.keras"), DATA, limit=1, **bad)


@pytest.mark.parametrize("verbose", VERBOSE_VALUES)
def test_train_evaluate_and_the_progress_bars_check_verbose_before_any_work(verbose, tmp_path, monkeypatch):
    # Audit (verbose): fit took any verbose ("no" and -1 hid its progress bars, True showed
    # them), once the chorales were read; evaluate's, nll_per_step's and sample's progress
    # bars were shown for "no" and -1, after the model was loaded. A numpy integer is taken.
    for name in ("load_rolls", "load_chorales", "next_step_arrays", "is_autoregressive"):
        monkeypatch.setattr(music, name, reached)
    monkeypatch.setattr(music.checks, "load_model", reached)
    model_path = tmp_path / "model.keras"
    model_path.write_bytes(b"")  # only its existence is checked before the model is loaded
    assert_verbose_checked_first([
        lambda: music.train(DATA, run_dir=str(tmp_path / "run"), epochs=1, limit=1, verbose=verbose, **TINY),
        lambda: music.evaluate(str(model_path), DATA, limit=1, sample_steps=2, verbose=verbose),
        lambda: music.nll_per_step(object(), [np.zeros((2, 88))], verbose=verbose),
        lambda: music.sample(object(), 2, verbose=verbose),
    ], verbose)
    assert not (tmp_path / "run").exists()


def test_evaluate_takes_a_run_directory_and_a_samples_folder(tmp_path, capsys):
    # `--model RUN_DIR` was refused (Keras' note on SavedModels), and `--samples-path DIR/`
    # wrote the hidden files DIR/.npy and DIR/.png
    from applications import __main__ as cli

    music.build_model(4, **TINY).save(tmp_path / "model.keras")
    (tmp_path / "out").mkdir()
    argv = ["evaluate", "music", "--data-dir", str(DATA), "--limit", "1", "--model", str(tmp_path),
            "--sample-steps", "2", "--samples-path", str(tmp_path / "out")]
    assert cli.main(argv) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert result["model"] == str(tmp_path / "model.keras") and np.isfinite(result["test_nll_per_step"])
    assert result["samples"] == str(tmp_path / "out" / "samples.npy")
    assert np.load(result["samples"]).shape == (1, 2, 88) and (tmp_path / "out" / "samples.png").is_file()


def test_evaluate_scores_the_chorales_that_train_scored_unless_told_otherwise(tmp_path, capsys, short_data):
    # `train --limit N` scored the first N chorales of every split but recorded no N, and
    # `evaluate` of its model then scored every chorale: another test NLL than train's.
    import argparse
    import shutil

    from applications import __main__ as cli

    run = tmp_path / "run"
    result = _small_run(short_data, run, limit=2)
    assert json.loads((run / "metrics.json").read_text())["limit"] == 2
    argv = ["evaluate", "music", "--data-dir", str(short_data), "--model", str(run), "--quiet"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["test_nll_per_step"] == pytest.approx(result["test_nll_per_step"],
                                                                                     rel=1e-6)
    # a --limit given wins: here all four test chorales
    model = keras.saving.load_model(run / "model.keras")
    every = music.nll_per_step(model, music.load_rolls(short_data)[0]["test"])
    assert every != pytest.approx(result["test_nll_per_step"], rel=1e-3)
    assert cli.main([*argv, "--limit", "4"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["test_nll_per_step"] == pytest.approx(every, rel=1e-6)
    # without a recorded limit (a model moved away from its run; a run on all chorales): all
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(run / "model.keras", moved / "model.keras")
    assert music.evaluate(str(moved / "model.keras"), short_data)["test_nll_per_step"] == pytest.approx(every, rel=1e-6)
    (moved / "metrics.json").write_text(json.dumps({"limit": None}))
    assert music.evaluate(str(moved / "model.keras"), short_data)["test_nll_per_step"] == pytest.approx(every, rel=1e-6)
    parser = argparse.ArgumentParser()
    music.add_arguments(parser, "evaluate")
    assert "`train` recorded beside the model" in " ".join(parser.format_help().split())


def test_ensemble_members_back_up_to_folders_of_their_own(tmp_path, monkeypatch):
    # every member shared one backup: a rerun after a crash in member 1 restored member 1's
    # weights and epoch into member 0
    import tensorflow as tf

    from applications import __main__ as cli

    args = cli._defaults(cli.build_parser("music").parse_args(
        ["train", "music", "--ensemble", "3", "--run-dir", str(tmp_path / "run"), "--quiet"]))
    seen = {}
    monkeypatch.setattr(music, "train", lambda *a, **kw: seen.update(kw))
    music.run_train(args, tf.distribute.get_strategy())
    backups = [next(c for c in seen["callbacks"](m) if hasattr(c, "backup_dir")).backup_dir for m in range(3)]
    assert len(set(backups)) == 3 and backups[0] == str(tmp_path / "run" / "backup")


@pytest.mark.parametrize("option", [["--num-samples", "4"], ["--temperature", "0.5"], ["--samples-path", "s.npy"],
                                    ["--seed", "3"]])  # audit 2026-11-28: --seed seeds the draws only
def test_sampling_options_without_sample_steps_are_a_usage_error(option, tmp_path, capsys):
    # they were accepted and silently ignored (no --sample-steps: nothing is sampled)
    from applications import __main__ as cli

    argv = ["evaluate", "music", "--data-dir", str(DATA), "--limit", "1", "--model", str(tmp_path / "m.keras"), *option]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: ") and "--sample-steps" in err and option[0] in err


@pytest.mark.parametrize("option, needs", [(["--nade-units", "8"], "--readout nade"),
                                           (["--reduce-lr-factor", "0.2"], "--reduce-lr-patience"),
                                           # audit 2026-11-28: it draws the masks of --dropout only
                                           (["--dropout-noise", "sequence"], "--dropout")])
def test_train_options_that_need_another_one_are_a_usage_error(option, needs, tmp_path, capsys):
    # --nade-units without --readout nade and --reduce-lr-factor without --reduce-lr-patience
    # were accepted and silently ignored
    from applications import __main__ as cli

    argv = ["train", "music", "--data-dir", str(DATA), "--limit", "1", "--epochs", "1", "--quiet",
            "--run-dir", str(tmp_path / "run"), *option]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("keras-capsules: error: ") and needs in err and option[0] in err
    assert not (tmp_path / "run").exists()


def test_data_functions_reject_bad_sizes_and_priors():
    # Audit 6: window=0 was a ZeroDivisionError (a negative or float window numpy
    # errors), batch_size=0 a TF InvalidArgumentError (nll_per_step: range() error),
    # no rolls "max() arg is an empty sequence", a roll of the wrong width a
    # broadcasting error, and prior <= 0 gave -inf/NaN output biases.
    rng = np.random.default_rng(0)
    rolls = [(rng.uniform(size=(n, 88)) < 0.1).astype("float32") for n in (5, 9)]
    arrays = music.next_step_arrays(rolls)
    for bad in (0, -2, 2.5):
        with pytest.raises(ValueError, match=rf"Received: window={bad}"):
            music.windows(*arrays, bad)
        with pytest.raises(ValueError, match=rf"Received: window={bad}"):
            music.make_dataset(rolls, 2, window=bad)
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        music.make_dataset(rolls, 0)
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        music.nll_per_step(None, rolls, batch_size=0)
    with pytest.raises(ValueError, match="at least one roll"):
        music.make_dataset([], 2)
    with pytest.raises(ValueError, match=r"shape \[steps, 88\]. Received: a roll of shape \(3, 10\)"):
        music.pad_rolls([np.zeros((3, 10))])
    for bad in (0, -1.0, float("inf")):
        with pytest.raises(ValueError, match=rf"Received: prior={bad}"):
            music.key_log_odds(rolls, prior=bad)
    assert music.key_log_odds(rolls[:0]).shape == (88,)
    # audit (2026-11-27): rolls without steps leave no window to shuffle, and tf.data
    # refused a shuffle buffer of 0 with its own error
    assert list(music.make_dataset([np.zeros((0, 88), "float32")], 2, window=4, shuffle=True)) == []


def test_load_rolls_refuses_a_non_positive_limit():
    # Audit 6: limit=-1 silently dropped the last chorale of every split, limit=0 gave
    # "max() arg is an empty sequence".
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match=rf"Received: limit={bad}"):
            music.load_rolls(DATA, limit=bad)
    rolls, _ = music.load_rolls(DATA, limit=2)
    assert [len(rolls[s]) for s in music.SPLITS] == [2, 2, 2]


def test_a_corrupt_or_misshapen_json_file_is_an_input_error_naming_it(tmp_path):
    # A truncated JSON file raised json's bare "Expecting value: line 1 column 30", not
    # naming the file (a traceback on the command line); a list was said to lack the splits.
    from applications.errors import InputError

    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"train": [[[60]]], "valid": ')
    with pytest.raises(InputError, match=r"truncated.json is not a readable JSON file"):
        music.load_chorales(truncated)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match=r"binary.json is not a readable JSON file"):
        music.load_chorales(binary)
    listed = tmp_path / "list.json"
    listed.write_text("[[[60, 64]]]")
    with pytest.raises(InputError, match=r"list.json must hold a JSON object .*Received: a list"):
        music.load_chorales(listed)


@pytest.mark.parametrize(
    "chorales, where",
    [
        ([[60, 64]], r"train\[0\]\[0\] must be a list of MIDI pitches"),
        ([[[60], [64, "E"]]], r"train\[0\]\[1\] holds 'E'"),
        ([[[60]], [[130]]], r"train\[1\]\[0\] holds 130, not the MIDI pitch of a piano key"),
        ({"a": 1}, r"train must be a list of chorales"),
    ],
)
def test_a_chorale_of_the_wrong_form_is_an_input_error_naming_file_and_chorale(tmp_path, chorales, where):
    # A step given as one pitch ([60, 64] for a chorale) raised TypeError "'int' object is
    # not iterable"; a pitch off the piano an InputError naming neither the file nor the chorale.
    from applications.errors import InputError

    path = tmp_path / "chorales.json"
    path.write_text(json.dumps({"train": chorales, "valid": [[[60]]], "test": [[[60]]]}))
    with pytest.raises(InputError, match=r"chorales.json: " + where):
        music.load_rolls(path)


def test_chorales_with_integral_float_pitches_still_load(tmp_path):
    # the check of the chorales' form must not refuse pitches written as 60.0 (piano_roll took them)
    path = tmp_path / "chorales.json"
    path.write_text(json.dumps({"train": [[[60.0, 64.0], []]], "valid": [[[60]]], "test": [[[108.0]]]}))
    rolls, longest = music.load_rolls(path)
    assert longest == 2 and rolls["train"][0][0].nonzero()[0].tolist() == [39, 43]
    assert rolls["test"][0][0, 87] == 1
    path.write_text(json.dumps({"train": [[[60.5]]], "valid": [[[60]]], "test": [[[60]]]}))
    with pytest.raises(ValueError, match=r"train\[0\]\[0\] holds 60.5"):
        music.load_rolls(path)


def test_nll_per_step_of_rolls_without_steps_is_an_input_error():
    # Rolls of 0 steps (empty chorales) ran the model and then divided by zero steps:
    # ZeroDivisionError. An empty chorale beside real ones still just counts no step.
    from applications.errors import InputError

    model = music.compile_model(music.build_model(steps=4, units=(4,)))
    with pytest.raises(InputError, match=r"at least one step. Received: 2 roll\(s\) of 0 steps"):
        music.nll_per_step(model, [np.zeros((0, 88), "float32")] * 2)
    roll = np.eye(88, dtype="float32")[[39, 41, 43]]
    assert music.nll_per_step(model, [roll, np.zeros((0, 88), "float32")], batch_size=1) == pytest.approx(
        music.nll_per_step(model, [roll]), rel=1e-6
    )


def _small_run(data, run_dir, **kwargs):
    options = dict(epochs=1, batch_size=4, window=2, limit=2, sample_steps=0, verbose=0, units=(4,), learning_rate=1e-2)
    options.update(kwargs)
    return music.train(data, run_dir=str(run_dir), **options)


def test_a_resumed_run_keeps_the_best_epoch_from_before_the_crash(tmp_path, monkeypatch, short_data):
    # The best validation loss was tracked in memory only: after a crash and a resume
    # the model saved as the best was the best of the epochs after the crash.
    from applications import fault_tolerance

    scripted, weights = [3.0, 1.0, 2.0, 2.5], {}  # validation losses: epoch 1 is the best

    class ScriptedValidation(keras.callbacks.Callback):  # stands in for TensorBoard, first in the list
        def __init__(self, *args, **kwargs):
            super().__init__()

        def on_epoch_end(self, epoch, logs=None):
            logs[music.MONITOR] = scripted[epoch]
            weights[epoch] = self.model.get_weights()

    monkeypatch.setattr(keras.callbacks, "TensorBoard", ScriptedValidation)
    run_dir = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated"):
        _small_run(short_data, run_dir, epochs=4,
                   callbacks=[*fault_tolerance.resumable_callbacks(str(run_dir)), CrashAt(2)])
    assert sorted(weights) == [0, 1]
    result = _small_run(short_data, run_dir, epochs=4, callbacks=fault_tolerance.resumable_callbacks(str(run_dir)))
    saved = keras.saving.load_model(run_dir / "model.keras").get_weights()
    for got, want in zip(saved, weights[1], strict=True):  # epoch 1's, not epoch 2's
        np.testing.assert_array_equal(got, want)
    assert sorted(weights) == [0, 1, 2, 3] and result["epochs_run"] == 4  # was 2: the epochs after the resume
    assert fault_tolerance.read_history_csv(run_dir / "history.csv")[1] == [0, 1, 2, 3]
    assert not (run_dir / "backup").exists() and not (run_dir / "members.json").exists()


def test_a_rerun_that_loads_finished_members_trains_the_others_as_an_unbroken_run_would(tmp_path, short_data):
    # audit (2026-11-27): the members shared one training pipeline, whose shuffle (and
    # transpositions) went on from the epochs of the members before: a rerun that loaded
    # member 0 gave member 1 another order, and another ensemble
    class CrashAtTheStart(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            raise RuntimeError("simulated crash")

    options = dict(ensemble=2, transpose=2)
    unbroken = _small_run(short_data, tmp_path / "unbroken", **options)
    with pytest.raises(RuntimeError, match="simulated"):
        _small_run(short_data, tmp_path / "rerun", callbacks=lambda member: [CrashAtTheStart()] if member else [],
                   **options)
    rerun = _small_run(short_data, tmp_path / "rerun", **options)
    assert rerun["test_nll_per_step"] == pytest.approx(unbroken["test_nll_per_step"], rel=1e-6)


def test_a_resumed_member_ends_with_the_weights_of_the_uninterrupted_run(tmp_path, short_data):
    # A crash in epoch 1 of member 1 and a rerun: tf.data drew the shuffles and
    # transpositions anew from epoch 0 in the new process, so the resumed epoch 1 was
    # trained on epoch 0's order and transpositions (member 1's max weight difference
    # 0.036 in this setting). Now every epoch's are drawn from (seed + member, epoch).
    # input_dropout=0.1 (the default): the masks' keras.random.SeedGenerator state, which
    # model.save_weights leaves out, is in the backup too (without it 0.029 here).
    #
    # These runs also carry the checks of test_a_resumed_ensemble_loads_the_members_that_had_finished
    # (one crash and rerun less to trace): A rerun after a crash in member 1 trained member 0
    # again from scratch.
    import pathlib

    from applications import fault_tolerance
    from tests.applications import cli_helpers

    backups = []  # (member, its backup callback) of every member trained
    first = []  # member 0's model file as the crashed run left it

    def run(run_dir, callbacks=(), **kwargs):  # member 1 gets `callbacks` (the crash)
        if str(run_dir) == str(tmp_path / "resumed") and not callbacks:  # the rerun, before it starts
            first.append((pathlib.Path(run_dir) / "model.keras").read_bytes())

        def member_callbacks(member):
            folder = pathlib.Path(run_dir) / (f"member_{member}" if member else "")
            folder.mkdir(parents=True, exist_ok=True)
            made = fault_tolerance.resumable_callbacks(str(folder))
            backups.append((member, made[0]))
            return [*made, *(callbacks if member else [])]

        return _small_run(short_data, run_dir, callbacks=member_callbacks, **kwargs)

    options = dict(epochs=2, ensemble=2, transpose=2, input_dropout=0.1, seed=1)
    run(tmp_path / "whole", **options)
    result = cli_helpers.crash_and_resume(run, tmp_path / "resumed", (1, 1), **options)
    # the rerun loaded member 0 and resumed member 1 at epoch 1 (the crashed run trained
    # members 0 and 1, the rerun member 1 only: "member 0 was trained again")
    assert [member for member, _ in backups] == [0, 1, 0, 1, 1] and backups[-1][1].restored_epoch == 1
    assert result["epochs_run"] == [2, 2]
    for name in ("model.keras", "model_1.keras"):
        assert cli_helpers.max_weight_difference(tmp_path / "whole" / name, tmp_path / "resumed" / name) == 0.0, name
    run_dir = tmp_path / "resumed"
    assert len(first) == 1 and (run_dir / "model.keras").read_bytes() == first[0]
    rolls, _ = music.load_rolls(short_data, limit=2)
    members = [keras.saving.load_model(run_dir / name) for name in ("model.keras", "model_1.keras")]
    assert music.nll_per_step(members, rolls["test"]) == pytest.approx(result["test_nll_per_step"], rel=1e-5)
    assert not (run_dir / "members.json").exists()
    # Another configuration does not reuse the members of an interrupted run.
    (run_dir / "members.json").write_text(json.dumps({"config": {"seed": 99}, "finished": {"0": 2}}))
    assert music._finished_members({"path": str(run_dir / "members.json"), "config": {"seed": 0}}) == {}


def test_a_crash_after_a_members_fit_is_finished_without_training_it_again(tmp_path, monkeypatch, short_data):
    # Member 1's backup (and its best epoch, best-<epoch>.npz) was deleted as soon as its fit
    # ended: a crash before its model file was written trained it again from scratch.
    from applications import fault_tolerance
    from tests.applications import cli_helpers

    run_dir, counters = tmp_path / "run", {}
    fit_ended = cli_helpers.crash_when_saving_after_fit(monkeypatch, "model_1.keras")  # member 0 is saved

    def member_callbacks(member):
        folder = run_dir / f"member_{member}" if member else run_dir
        folder.mkdir(parents=True, exist_ok=True)
        counters[member] = cli_helpers.CountBatches()
        return [*fault_tolerance.resumable_callbacks(str(folder)), counters[member], fit_ended]

    with pytest.raises(RuntimeError, match="simulated"):
        _small_run(short_data, run_dir, epochs=2, ensemble=2, callbacks=member_callbacks)
    assert not (run_dir / "model_1.keras").exists() and list((run_dir / "member_1" / "backup").glob("best-*.npz"))
    assert not (run_dir / "backup").exists(), "member 0, listed in members.json, needs no backup"
    monkeypatch.undo()
    counters.clear()
    result = _small_run(short_data, run_dir, epochs=2, ensemble=2, callbacks=member_callbacks)
    assert list(counters) == [1] and counters[1].batches == 0, "member 1 was trained again"
    assert result["epochs_run"] == [2, 2] and (run_dir / "model_1.keras").is_file()
    assert not (run_dir / "member_1" / "backup").exists() and not (run_dir / "members.json").exists()


def test_a_resumed_run_with_a_moving_average_goes_on_from_the_trained_weights(tmp_path, short_data):
    # With ema_momentum, SwapEMAWeights(swap_on_epoch=True) swaps the average into the
    # model at each epoch's end, before the backup: the backup held the average as the
    # model's weights and the trained weights as the optimizer's average. A resumed run
    # restored that and trained on from the average, with the trained weights as its
    # average (an uninterrupted run swaps them back at the next epoch's start).
    from applications import fault_tolerance

    starts = {}

    class Record(keras.callbacks.Callback):  # after SwapEMAWeights: sees what epoch 1 trains
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 1:
                optimizer = self.model.optimizer
                starts.setdefault("crashed" if "crashed" not in starts else "resumed", (
                    [np.array(v) for v in self.model.trainable_weights],
                    [np.array(v) for v in optimizer._model_variables_moving_average],
                ))

    run_dir = tmp_path / "run"
    options = dict(epochs=2, ema_momentum=0.5)
    with pytest.raises(RuntimeError, match="simulated"):
        _small_run(short_data, run_dir,
                   callbacks=[*fault_tolerance.resumable_callbacks(str(run_dir)), Record(), CrashAt(1)], **options)
    _small_run(short_data, run_dir, callbacks=[*fault_tolerance.resumable_callbacks(str(run_dir)), Record()], **options)
    (trained, average), (resumed_trained, resumed_average) = starts["crashed"], starts["resumed"]
    assert any(not np.allclose(a, b) for a, b in zip(trained, average)), "the test needs an average != weights"
    for got, want in zip(resumed_trained + resumed_average, trained + average, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("save_freq", ["epoch", 1])
def test_a_resumed_run_keeps_the_patience_of_reduce_lr_on_plateau(save_freq, tmp_path, monkeypatch, short_data):
    # ReduceLROnPlateau's state (epochs waited, best loss, cooldown) was not in the
    # backup: a resumed run started its patience again from scratch, and lowered the
    # learning rate later than the uninterrupted run would have.
    from applications import fault_tolerance

    scripted = [1.0, 2.0, 2.0, 2.0, 2.0, 2.0]  # no improvement after epoch 0: patience 2 halves at 2 and 4
    rates = {}

    class ScriptedValidation(keras.callbacks.Callback):  # stands in for TensorBoard, first in the list
        def __init__(self, *args, **kwargs):
            super().__init__()

        def on_epoch_end(self, epoch, logs=None):
            logs[music.MONITOR] = scripted[epoch]

    class Record(keras.callbacks.Callback):  # after ReduceLROnPlateau: the rate the epoch ends with
        def on_epoch_end(self, epoch, logs=None):
            rates[epoch] = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))

    monkeypatch.setattr(keras.callbacks, "TensorBoard", ScriptedValidation)
    run_dir = tmp_path / "run"
    options = dict(epochs=6, learning_rate=1e-3, reduce_lr_patience=2, reduce_lr_factor=0.5)

    def callbacks(*extra):
        return [*fault_tolerance.resumable_callbacks(str(run_dir), save_freq=save_freq), Record(), *extra]

    with pytest.raises(RuntimeError, match="simulated"):
        _small_run(short_data, run_dir, callbacks=callbacks(CrashAt(3)), **options)
    assert sorted(rates) == [0, 1, 2]
    _small_run(short_data, run_dir, callbacks=callbacks(), **options)
    expected = [1e-3, 1e-3, 5e-4, 5e-4, 2.5e-4, 2.5e-4]  # those of an uninterrupted run
    assert [rates[epoch] for epoch in range(6)] == pytest.approx(expected), rates
    assert not (run_dir / "backup").exists()


@pytest.mark.parametrize("window", [None, 4])
def test_the_validation_nll_that_keeps_the_best_epoch_is_the_nll_per_real_step(tmp_path, monkeypatch, chorales,
                                                                              window):
    # The best epoch was chosen on val_loss: Keras averages the batches' losses weighted by
    # their numbers of windows, not of real steps, and the windows of padded chorales hold
    # different numbers of real steps, so it was not the NLL per real step of the validation
    # windows (nor, on whole chorales, nll_per_step).
    from applications import fault_tolerance

    kept = []

    class Recorded(fault_tolerance.KeepBestWeights):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            kept.append(self)

    monkeypatch.setattr(fault_tolerance, "KeepBestWeights", Recorded)
    # real chorales cut short (quick to unroll); batches of 2 of 3 validation chorales of
    # 7, 1 and 5 steps (windows of 4: 4+3, 1, 4+1) hold different numbers of real steps
    data = tmp_path / "chorales.json"
    data.write_text(json.dumps({
        "train": [c[:6] for c in chorales["train"][:4]],
        "valid": [c[:n] for c, n in zip(chorales["valid"][:3], (7, 1, 5), strict=True)],
        "test": [c[:4] for c in chorales["test"][:2]],
    }))
    run_dir = tmp_path / "run"
    result = music.train(data, run_dir=str(run_dir), epochs=1, batch_size=2, window=window, input_dropout=0.0,
                         sample_steps=0, verbose=0, units=(4,), learning_rate=1e-2)
    (best,) = kept
    assert best.best_epoch == 0 and np.isfinite(best.best)
    rolls, longest = music.load_rolls(data)
    inputs, targets, mask = music.windows(*music.next_step_arrays(rolls["valid"], longest), window or longest)
    model = keras.saving.load_model(run_dir / "model.keras")
    logits = np.asarray(model.predict(inputs, verbose=0), "float64")
    per_step = (np.logaddexp(0.0, -logits) * targets + np.logaddexp(0.0, logits) * (1 - targets)).sum(-1)
    assert best.best == pytest.approx((per_step * mask).sum() / mask.sum(), rel=1e-5)
    if window is None:  # whole chorales: the reported metric itself
        assert best.best == pytest.approx(result["valid_nll_per_step"], rel=1e-5)


def test_the_loss_under_two_replicas_is_the_one_device_loss_for_chorales_of_unequal_lengths():
    # audit (2026-11-27): Keras divided each replica's NLL sum by that replica's own real
    # steps, so under --strategy mirrored the chorales of a replica with fewer real steps
    # weighed more (the gradient of one batch of 2, 3, 8 and 8 steps was 13% off)
    from applications import distribute
    from tests.harness import two_cpu_strategy

    rng = np.random.default_rng(0)
    rolls = [(rng.random((n, music.NUM_KEYS)) < 0.1).astype("float32") for n in (1, 2, 5, 5)]
    data = music.make_dataset(rolls, batch_size=4, steps=5)

    def one_step(strategy):
        with strategy.scope():
            keras.utils.set_random_seed(0)
            model = music.build_model(5, units=(8,))
            model.compile(optimizer=keras.optimizers.SGD(1.0), loss=music.PianoRollNLL())
        before = [w.numpy() for w in model.trainable_weights]
        loss = model.fit(data, epochs=1, verbose=0, shuffle=False).history["loss"][0]
        return loss, [w.numpy() - b for w, b in zip(model.trainable_weights, before)]

    (loss, steps), (loss_1, steps_1) = (one_step(distribute.resolve_strategy(two_cpu_strategy())),
                                        one_step(distribute.make_strategy("default")))
    np.testing.assert_allclose(loss, loss_1, rtol=1e-5)
    for step, step_1 in zip(steps, steps_1):
        np.testing.assert_allclose(step, step_1, rtol=1e-4, atol=1e-6)
    assert any(np.abs(step).max() > 1e-4 for step in steps_1)  # the step moved the weights


@pytest.mark.parametrize("masked", [False, True])
def test_the_loss_on_masked_or_weighted_steps_under_two_replicas_is_the_one_device_loss(masked):
    # PianoRollNLL is a GlobalBatchLoss: with a Keras mask on the logits (a user's model
    # with a Masking layer) it used to fall back to Keras' division by each replica's
    # own count of real steps.
    from tests.harness import replica_losses_add_up

    rng = np.random.default_rng(4)
    logits = rng.normal(size=(4, 6, music.NUM_KEYS)).astype("float32")
    rolls = (rng.random((4, 6, music.NUM_KEYS)) < 0.1).astype("float32")
    real = np.ones((4, 6), bool)
    real[2:, 2:] = False  # the second replica's chorales hold two real steps each
    weights = None if masked else real.astype("float32")
    one, replicas = replica_losses_add_up(music.PianoRollNLL(), rolls, logits, real if masked else None, weights)
    np.testing.assert_allclose(replicas, one, rtol=1e-6)
    per_step = music._step_nll(keras.ops.convert_to_tensor(rolls), keras.ops.convert_to_tensor(logits))
    assert one == pytest.approx(float(np.sum(keras.ops.convert_to_numpy(per_step) * real) / real.sum()), rel=1e-6)


@pytest.mark.parametrize("split", ["train", "test"])
def test_a_split_of_chorales_without_a_time_step_is_refused_before_training(split, tmp_path):
    # Training chorales of no step trained nothing and exited 0 with an untrained model's
    # metrics; test chorales of no step failed only after the whole run, naming no file.
    chorales = {"train": [[[60], [62]]] * 2, "valid": [[[60], [64]]], "test": [[[62], [60]]]}
    chorales[split] = [[], []]
    path = tmp_path / "chorales.json"
    path.write_text(json.dumps(chorales))
    with pytest.raises(ValueError, match=rf"chorales.json: the {split} chorales hold no time step"):
        music.train(str(path), run_dir=str(tmp_path / "run"), epochs=1, units=(4,), verbose=0)
    assert not (tmp_path / "run" / "model.keras").exists()


# audit 2026-11-28 (Recurrent Ladder applications)
def test_evaluate_of_an_ensemble_run_scores_the_ensemble_that_train_reported(tmp_path, capsys, short_data):
    # train --ensemble N reported the NLL of the members' mean probabilities, but evaluate of
    # its model.keras scored member 0 alone: another test NLL than train's. (train records the
    # member files: test_train_an_ensemble_with_dropout_and_output_bias.)
    from applications import __main__ as cli

    run = tmp_path / "run"
    run.mkdir()
    members = [music.build_model(4, **TINY), music.build_model(4, **TINY)]
    for model, name in zip(members, ("model.keras", "model_1.keras")):
        model.save(run / name)
    (run / "metrics.json").write_text(json.dumps({"limit": 2, "members": ["model.keras", "model_1.keras"]}))
    rolls = music.load_rolls(short_data, limit=2)[0]["test"]
    ensemble, second = music.nll_per_step(members, rolls), music.nll_per_step(members[1], rolls)
    assert ensemble != pytest.approx(music.nll_per_step(members[0], rolls), rel=1e-4)
    capsys.readouterr()
    argv = ["evaluate", "music", "--data-dir", str(short_data), "--model", str(run), "--quiet"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    scored = json.loads(capsys.readouterr().out)
    assert scored["test_nll_per_step"] == pytest.approx(ensemble, rel=1e-6)
    assert scored["members"] == [str(run / "model.keras"), str(run / "model_1.keras")]
    # another member's file is that member alone
    alone = music.evaluate(str(run / "model_1.keras"), short_data)
    assert alone["test_nll_per_step"] == pytest.approx(second, rel=1e-6) and "members" not in alone
    # a member gone is one line naming it, not the first member's NLL
    (run / "model_1.keras").rename(tmp_path / "away.keras")
    with pytest.raises(FileNotFoundError, match="model_1.keras"):
        music.evaluate(str(run / "model.keras"), short_data)


def test_train_from_python_stops_a_diverged_run_in_one_line(tmp_path, short_data):
    # audit (2026-11-28): `train` called from Python (without the command line's resumable
    # callbacks) trained a NaN model to the end, then saved and scored it: no error
    from applications.fault_tolerance import TrainingDivergedError
    from tests.applications.cli_helpers import PoisonWeightsAt

    with pytest.raises(TrainingDivergedError, match=r"^training diverged: the loss became nan in epoch 1, batch 2"):
        music.train(short_data, run_dir=str(tmp_path), epochs=1, batch_size=1, window=4, limit=3, verbose=0,
                    callbacks=[PoisonWeightsAt(1)], **TINY)
    assert not (tmp_path / "model.keras").exists() and not (tmp_path / "metrics.json").exists()


@pytest.mark.parametrize("use_decoder", [True, False])
def test_a_seed_without_dropout_or_zoneout_warns_about_nothing(tmp_path, use_decoder):
    # `train music` passes its --seed to every model; without dropout or zoneout RLadder
    # has nothing to seed, and warned "seed=0 has no effect" at every build and load.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        model = music.build_model(4, use_decoder=use_decoder, seed=0, **TINY)
        model.save(tmp_path / "m.keras")
        keras.saving.load_model(tmp_path / "m.keras")
    # with dropout the seed still reaches the ladder (its masks repeat with it)
    seeded = music.build_model(4, use_decoder=use_decoder, dropout=0.3, seed=5, **TINY)
    assert seeded.get_layer("rladder").seed == 5


def test_a_window_longer_than_every_chorale_builds_the_model_for_the_longest(tmp_path, chorales):
    # --window 1000 --limit 2 unrolled the ladder over 1,000 steps: minutes of silent
    # tracing, for windows that each held one chorale and ~990 masked steps
    data = tmp_path / "chorales.json"
    data.write_text(json.dumps({split: [c[:n] for c, n in zip(chorales[split][:2], (7, 5), strict=True)]
                                for split in ("train", "valid", "test")}))
    run_dir = tmp_path / "run"
    result = music.train(data, run_dir=str(run_dir), epochs=1, batch_size=2, window=64, sample_steps=0,
                         verbose=0, units=(4,))
    model = keras.saving.load_model(run_dir / "model.keras")
    assert model.input_shape[1] == 7  # the longest chorale read
    assert np.isfinite(result["valid_nll_per_step"]) and np.isfinite(result["test_nll_per_step"])


def test_rolls_of_values_other_than_0_and_1_are_refused():
    # Audit (apps 1): pad_rolls and nll_per_step took a roll of 2.0s (scored as a "likelihood"
    # of 56.7 nats per step, which no Bernoulli gives), or of 0.5s or NaNs, without a word.
    from applications.errors import InputError

    good = np.zeros((3, 88), "float32")
    good[1, 40] = 1
    for value in (2.0, 0.5, -1.0, float("nan")):
        bad = good.copy()
        bad[2, 7] = value
        with pytest.raises(InputError, match=rf"must hold 0 or 1 .*Received: rolls\[1\] holding {value}$"):
            music.pad_rolls([good, bad])
        with pytest.raises(InputError, match=r"Received: rolls\[1\] holding"):
            music.make_dataset([good, bad], 2)
    with pytest.raises(InputError, match=r"Received: rolls\[0\] holding 2.0"):
        music.nll_per_step(None, [np.full((3, 88), 2.0)])  # refused before the model runs
    rolls, mask = music.pad_rolls([good.astype(bool), good.astype("int64")[:2]])  # 0/1 of other dtypes
    assert rolls.dtype == np.float32 and rolls.sum() == 2 and mask.tolist() == [[1, 1, 1], [1, 1, 0]]


def test_a_file_without_chorales_is_refused_naming_it_before_a_run_directory_is_made(tmp_path, capsys):
    # Audit (apps 1): load_rolls of a file whose splits were all empty was a bare ValueError
    # ("max() arg is an empty sequence"), and train (from the command line too) left an empty
    # run directory behind.
    import re

    from applications import __main__ as cli
    from applications.errors import InputError

    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / "jsb_chorales.json"
    path.write_text(json.dumps({"train": [], "valid": [], "test": []}))
    message = rf"{re.escape(str(path))} holds no chorales: its splits \('train', 'valid', 'test'\) are all empty"
    with pytest.raises(InputError, match=message):
        music.load_rolls(path)
    with pytest.raises(InputError, match=message):
        music.load_rolls(path.parent)  # the file of the folder, named
    with pytest.raises(InputError, match=message):
        music.train(path, run_dir=str(tmp_path / "run"), epochs=1, verbose=0, **TINY)
    assert not (tmp_path / "run").exists()
    argv = ["train", "music", "--data-dir", str(path), "--epochs", "1", "--quiet", "--run-dir", str(tmp_path / "cli")]
    assert cli.main(argv) == 2
    assert "holds no chorales" in capsys.readouterr().err and not (tmp_path / "cli").exists()


def test_sample_takes_a_numpy_temperature_and_refuses_an_infinite_one():
    # Audit (apps 1): np.float32(0.5) was refused as "not a positive number", inf taken
    # (every key drawn at probability 0.5).
    rng = np.random.default_rng(0)
    logits = np.array([[-20.0, 20.0, 0.0]])
    assert music.sample_keys(logits, rng, temperature=np.float32(0.5)).shape == (1, 3)
    for bad in (float("inf"), 0, -1.0, True, "1"):
        with pytest.raises(ValueError, match=r"`temperature` must be a finite number > 0. Received: temperature="):
            music.sample_keys(logits, rng, temperature=bad)


@pytest.mark.graph_mode  # traced: the rank is unknown only there
@pytest.mark.parametrize("unknown", ["y_true", "y_pred"])
def test_piano_roll_nll_refuses_rolls_or_logits_of_unknown_rank(unknown):
    # Audit (apps): rolls (or logits) traced for tf.TensorSpec(shape=None), e.g. from a
    # tf.numpy_function in a pipeline, failed deep in Keras' binary_crossentropy with
    # TensorFlow's "Cannot take the length of shape with unknown rank".
    import tensorflow as tf

    rolls = np.zeros((2, 3, music.NUM_KEYS), "float32")
    loss = music.PianoRollNLL()
    specs = [tf.TensorSpec(shape=None if name == unknown else rolls.shape) for name in ("y_true", "y_pred")]
    for weights in (None, np.ones((2, 3), "float32")):
        traced = tf.function(lambda y, p: loss(y, p, sample_weight=weights), input_signature=specs)
        with pytest.raises(ValueError, match=rf"PianoRollNLL needs y_true and y_pred of known rank: .* Received: "
                                             rf".*{unknown} shape=<unknown rank>"):
            traced(rolls, rolls)


def _logits_rolls_and_mask(seed):
    """Random logits and 0/1 rolls of 2 sequences of 3 steps, and a step mask (the
    first sequence's last step padded)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(2, 3, music.NUM_KEYS)).astype("float32")
    rolls = (rng.uniform(size=(2, 3, music.NUM_KEYS)) < 0.1).astype("float32")
    return logits, rolls, np.array([[1, 1, 0], [1, 1, 1]], "float32")


@pytest.mark.graph_mode  # traced calls too: they cannot raise, they give NaN
def test_piano_roll_nll_refuses_rolls_outside_0_and_1_where_they_count():
    # Audit (apps): a roll value of 2 or -1 made a key's cross-entropy unbounded below (2 with
    # a logit of 50: -50 nats), a NaN made the loss NaN, without a word, in eager calls and
    # in fit alike (the losses of keras_capsules.losses refuse such labels).
    import tensorflow as tf

    logits, rolls, mask = _logits_rolls_and_mask(seed=0)
    loss = music.PianoRollNLL()
    base = float(loss(rolls, logits, sample_weight=mask))
    traced = tf.function(lambda y, p, w: loss(y, p, sample_weight=w))
    for value in (2.0, -1.0, float("nan")):
        bad = rolls.copy()
        bad[1, 2, 5] = value
        with pytest.raises(InputError, match=rf"^PianoRollNLL takes rolls y_true of values in \[0, 1\] .*Received: "
                                             rf"y_true with values \[{value}\] outside \[0, 1\]$"):
            loss(bad, logits, sample_weight=mask)
        # traced (fit, evaluate): that step's loss is NaN, the reported loss too, and it has no gradient
        variable = tf.Variable(logits)
        with tf.GradientTape() as tape:
            result = traced(bad, variable, mask)
        gradient = tape.gradient(result, variable).numpy()
        assert np.isnan(float(result)) and np.all(np.isfinite(gradient)) and not gradient[1, 2].any()
        # a step that counts for nothing (weight 0, or masked by the logits' Keras mask) may hold anything
        padded = rolls.copy()
        padded[0, 2] = value
        assert float(loss(padded, logits, sample_weight=mask)) == pytest.approx(base, rel=1e-6)
        assert float(loss(padded, logits, sample_weight=mask[..., None])) == pytest.approx(base, rel=1e-6)
        assert float(traced(padded, logits, mask)) == pytest.approx(base, rel=1e-6)
        masked = tf.function(lambda y, p: loss(y, _with_keras_mask(p, mask)))
        assert float(masked(padded, logits)) == pytest.approx(float(masked(rolls, logits)), rel=1e-6)
    # probabilities in [0, 1], and 0s and 1s of other dtypes, are rolls: their loss is the same
    soft = np.full((1, 1, music.NUM_KEYS), 0.5, "float32")
    assert float(loss(soft, np.zeros_like(soft))) == pytest.approx(music.NUM_KEYS * np.log(2.0), rel=1e-6)
    assert float(loss(rolls.astype(bool), logits, sample_weight=mask)) == pytest.approx(base, rel=1e-6)
    assert float(traced(rolls, logits, mask)) == pytest.approx(base, rel=1e-6)


def _with_keras_mask(logits, mask):
    """``logits`` carrying the Keras mask ``mask`` (as a Masking layer leaves it on its output)."""
    import tensorflow as tf

    logits = tf.identity(logits)
    logits._keras_mask = tf.constant(mask > 0)
    return logits


@pytest.mark.graph_mode  # traced updates too: they cannot raise, they give NaN
def test_nll_per_step_metric_refuses_rolls_outside_0_and_1_where_they_count():
    # Audit (apps): the metric that keeps the best epoch scored a key labelled 2 as -50
    # nats for a logit of 50 (lowering the reported NLL), as PianoRollNLL did
    import tensorflow as tf

    logits, rolls, mask = _logits_rolls_and_mask(seed=1)

    def score(y, traced=False):
        metric = music.PianoRollNLLPerStep()
        if traced:  # (as fit and evaluate update it)
            tf.function(lambda r: metric.update_state(r, logits, mask))(y)
        else:
            metric.update_state(y, logits, mask)
        return float(metric.result())

    base = score(rolls)
    assert base == pytest.approx(float(music.PianoRollNLL(reduction="sum")(rolls, logits, sample_weight=mask)) / 5,
                                 rel=1e-5)
    for value in (2.0, -1.0, float("nan")):
        bad = rolls.copy()
        bad[1, 2, 5] = value
        with pytest.raises(InputError, match=r"^PianoRollNLLPerStep takes rolls y_true of values in \[0, 1\]"):
            score(bad)
        assert np.isnan(score(bad, traced=True))
        padded = rolls.copy()
        padded[0, 2] = value  # a step that does not count may hold anything
        assert score(padded) == pytest.approx(base, rel=1e-6)
        assert score(padded, traced=True) == pytest.approx(base, rel=1e-6)


@pytest.mark.parametrize("per_member", [False, True], ids=["list", "member_function"])
def test_a_python_run_resumed_on_other_chorales_is_refused_before_training(tmp_path, per_member):
    # (2026-12-06) Only the command line's backups recorded the chorales file (through
    # run_options): a crashed music.train called from Python, resumed on another file,
    # went on training the restored weights on other chorales. Its backups now record the
    # file's fingerprint as the command line's do; the same file moved still resumes.
    import json
    import os

    from applications import fault_tolerance
    from applications.shared_data import files_fingerprint
    from tests.applications.short_data import SHORT_LENGTHS, write_short_chorales

    first, run_dir = write_short_chorales(tmp_path / "first"), tmp_path / "run"

    def callbacks(extra=()):
        made = [*fault_tolerance.resumable_callbacks(str(run_dir), run_options={"seed": 0}), *extra]
        return (lambda member: made) if per_member else made

    with pytest.raises(RuntimeError, match="simulated"):
        _small_run(str(first), run_dir, epochs=2, callbacks=callbacks([CrashAt(1)]))
    backup = run_dir / fault_tolerance.BACKUP_DIR
    assert json.loads((backup / "training_metadata.json").read_text())["options"] == {
        "seed": 0, "data_fingerprint": files_fingerprint("JSB Chorales", first, [first])}
    other = write_short_chorales(tmp_path / "first", {**SHORT_LENGTHS, "test": (8, 12, 6, 11)})
    before = sorted((p, p.stat().st_mtime_ns) for p in run_dir.rglob("*") if p.is_file())
    with pytest.raises(fault_tolerance.BackupMismatchError, match="is of a run on other data: JSB Chorales"):
        _small_run(str(other), run_dir, epochs=2, callbacks=callbacks())
    assert sorted((p, p.stat().st_mtime_ns) for p in run_dir.rglob("*") if p.is_file()) == before
    write_short_chorales(tmp_path / "first")  # the run's chorales again, in another folder
    os.rename(tmp_path / "first", tmp_path / "moved")
    result = _small_run(str(tmp_path / "moved" / "jsb_chorales.json"), run_dir, epochs=2, callbacks=callbacks())
    assert result["epochs_run"] == 2 and not backup.exists()


def test_the_runs_chorales_file_is_its_data_under_any_name_and_another_file_beside_it_is_not(tmp_path, capsys):
    # (2026-12-06) The chorales file's fingerprint named it by its file name, in its folder:
    # another file given beside the run's (its own folder unchanged) was refused as "the
    # folder now holds other data: put the run's data back there", and the run's own file
    # under another name (a symbolic link, a renamed copy) was scored with a note that it
    # was not the run's data, and a crashed run resumed on it was refused. The fingerprint
    # is of the file now, wherever it is and whatever it is called.
    import os
    import shutil

    from applications import fault_tolerance
    from tests.applications.short_data import SHORT_LENGTHS

    first, run_dir = write_short_chorales(tmp_path / "first"), tmp_path / "run"

    def callbacks(extra=()):
        return [*fault_tolerance.resumable_callbacks(str(run_dir), run_options={"seed": 0}), *extra]

    with pytest.raises(RuntimeError, match="simulated"):
        _small_run(str(first), run_dir, epochs=2, callbacks=callbacks([CrashAt(1)]))
    renamed = tmp_path / "elsewhere" / "chorales.json"
    renamed.parent.mkdir()
    shutil.copyfile(first, renamed)
    os.symlink(first, tmp_path / "link.json")
    result = _small_run(str(renamed), run_dir, epochs=2, callbacks=callbacks())  # was refused: other data
    assert result["epochs_run"] == 2 and not (run_dir / fault_tolerance.BACKUP_DIR).exists()
    for same in (renamed, tmp_path / "link.json"):  # the run's file: its score, no note
        scored = music.evaluate(result["model"], str(same))["test_nll_per_step"]
        assert scored == pytest.approx(result["test_nll_per_step"], rel=1e-5)
        assert capsys.readouterr().err == ""
    beside = tmp_path / "elsewhere" / "other.json"  # another file beside the run's: the user's choice
    write_short_chorales(tmp_path / "other", {**SHORT_LENGTHS, "test": (8, 12, 6, 11)}).rename(beside)
    assert np.isfinite(music.evaluate(result["model"], str(beside))["test_nll_per_step"])  # was refused
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"note: JSB Chorales in {beside} are not the data "), err
