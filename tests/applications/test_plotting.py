"""The shared plotting helpers of the applications: figures, colour maps, count checks, atomic save and close."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from applications import plotting


def test_the_applications_import_without_matplotlib():
    # matplotlib is imported when a plot is drawn, not when the modules are imported.
    # (Keras imports it by itself where it is installed, so block it rather than look.)
    modules = ", ".join(f"applications.{name}" for name in (
        "plotting", "demo", "music", "clevr", "smallnorb", "occluded_mnist", "textured_mnist"))
    code = f"import sys; sys.modules['matplotlib'] = None; import {modules}"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=pathlib.Path(__file__).parents[2])


def test_drawing_keeps_the_process_backend_and_never_imports_pyplot(tmp_path):
    # plotting.pyplot() switched the whole process to Agg (a notebook lost its inline
    # plots after the first PNG) and registered every figure with pyplot. Now a plot
    # is drawn on a Figure of its own: the backend a user chose stays, pyplot is not
    # even imported (it is blocked here), and the PNG is still written.
    code = (
        "import sys, matplotlib; matplotlib.use('svg'); sys.modules['matplotlib.pyplot'] = None\n"
        "from applications import demo, plotting\n"
        f"demo.plot_history({{'loss': [1.0, 0.5], 'val_loss': [1.1, 0.7]}}, {str(tmp_path / 'h.png')!r})\n"
        "fig, axes = plotting.subplots(2, 3, figsize=(3, 2), squeeze=False)\n"
        "assert axes.shape == (2, 3) and tuple(fig.get_size_inches()) == (3.0, 2.0)\n"
        "assert len(plotting.colormap('tab10').colors) == 10\n"
        f"plotting.save_and_close(fig, {str(tmp_path / 'g.png')!r}, format='png')\n"
        "print(matplotlib.get_backend())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=pathlib.Path(__file__).parents[2])
    assert out.stdout.strip().lower() == "svg"
    for name in ("h.png", "g.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_save_and_close_also_closes_a_pyplot_figure(tmp_path):
    import matplotlib.pyplot as plt

    fig = plt.figure()
    plotting.save_and_close(fig, tmp_path / "p.png")
    assert not plt.fignum_exists(fig.number) and (tmp_path / "p.png").exists()


@pytest.mark.parametrize("value", [1, 3, np.int64(2), np.int32(7)])
def test_positive_count_accepts_positive_integers(value):
    count = plotting.positive_count("num_images", value)
    assert count == int(value) and type(count) is int


@pytest.mark.parametrize("value", [0, -1, 2.0, 1.5, True, False, "3", None, np.float32(2)])
def test_positive_count_rejects_anything_else(value):
    expected = f"`num_things` must be a positive integer. Received: num_things={value!r}"
    with pytest.raises(ValueError) as error:
        plotting.positive_count("num_things", value)
    assert str(error.value) == expected


def test_save_and_close_writes_a_readable_png(tmp_path):
    import matplotlib.image

    fig, ax = plotting.subplots(figsize=(2, 1.5))
    ax.plot([0, 1, 2], [1, 0, 1])
    path = tmp_path / "figure.png"
    assert plotting.save_and_close(fig, path, dpi=50, format="png") == path
    image = matplotlib.image.imread(path)
    assert image.shape[:2] == (75, 100)  # figsize * dpi
    assert os.listdir(tmp_path) == ["figure.png"], "a temporary file was left behind"


def test_save_and_close_lays_out_only_when_asked(tmp_path, monkeypatch):
    calls = []
    for tight_layout in (True, False):
        fig, _ = plotting.subplots()
        monkeypatch.setattr(fig, "tight_layout", lambda: calls.append(tight_layout))
        plotting.save_and_close(fig, tmp_path / f"{tight_layout}.png", tight_layout=tight_layout)
    assert calls == [True]


def test_a_failed_save_closes_the_figure_and_keeps_the_old_file(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    path = tmp_path / "figure.png"
    path.write_bytes(b"old")
    fig = plt.figure()  # a pyplot figure: closed in pyplot even when the save fails
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1])

    def failing_savefig(filename, **kwargs):
        with open(filename, "wb") as f:
            f.write(b"half a PNG")
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(fig, "savefig", failing_savefig)
    with pytest.raises(OSError, match="simulated"):
        plotting.save_and_close(fig, path, format="png")
    assert not plt.fignum_exists(fig.number)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["figure.png"], "a temporary file was left behind"


def test_a_figure_saved_to_a_path_without_a_suffix_lands_there(tmp_path):
    # audit (2026-11-27): matplotlib wrote the temporary file to tmp + ".png", so the
    # atomic save failed (FileNotFoundError naming the temporary path) and left it behind
    fig, ax = plotting.subplots()
    ax.plot([0, 1], [1, 2])
    plotting.save_and_close(fig, str(tmp_path / "attention"), dpi=50)
    assert sorted(os.listdir(tmp_path)) == ["attention"]
    assert (tmp_path / "attention").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_history_plot_draws_an_accuracy_panel_only_with_an_accuracy_and_whole_epochs(tmp_path, monkeypatch):
    # textured_mnist without a classifier drew an empty "digit_accuracy" panel; the epoch
    # axes were ticked 1.0, 1.2, ... 2.0.
    from applications import demo, plotting

    figures = []
    save = plotting.save_and_close
    monkeypatch.setattr(plotting, "save_and_close", lambda fig, path, **kw: (figures.append(fig), save(fig, path, **kw)))
    demo.plot_history({"loss": [1.0, 0.5], "val_loss": [1.0, 0.6]}, str(tmp_path / "a.png"), accuracy="digit_accuracy")
    demo.plot_history({"loss": [1.0, 0.5], "accuracy": [0.5, 0.7], "val_accuracy": [0.4, 0.6]},
                      str(tmp_path / "b.png"))
    assert [len(fig.axes) for fig in figures] == [1, 2]
    for fig in figures:
        for ax in fig.axes:
            ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
            assert ticks and all(float(t).is_integer() for t in ticks), ticks
    assert (tmp_path / "a.png").is_file() and (tmp_path / "b.png").is_file()


def test_the_history_plot_names_the_curves_of_the_data_fit_watched(tmp_path, monkeypatch):
    # the demo, occluded_mnist and textured_mnist pass their test data to fit (watched,
    # nothing chosen on it), and the legend called those curves validation ("val_loss")
    from applications import demo, plotting
    from tests.applications.test_demo import TINY

    figures = []
    save = plotting.save_and_close
    monkeypatch.setattr(plotting, "save_and_close", lambda fig, path, **kw: (figures.append(fig), save(fig, path, **kw)))

    def legends():
        return [[text.get_text() for text in ax.get_legend().get_texts()] for ax in figures.pop().axes]

    demo.plot_history({"loss": [1.0, 0.5], "val_loss": [1.0, 0.6]}, str(tmp_path / "a.png"))
    assert legends() == [["train_loss", "val_loss"]]
    demo.train(str(tmp_path / "run"), epochs=1, batch_size=16, limit=60, verbose=0, model_options=TINY)
    assert legends() == [["train_loss", "test_loss"], ["train_accuracy", "test_accuracy"]]
    from applications import occluded_mnist, textured_mnist
    from tests.conftest import shared_path

    calls = []  # (both import demo's plot_history when they train)
    monkeypatch.setattr(demo, "plot_history", lambda *args, **kwargs: calls.append(kwargs.get("held_out")))
    occluded_mnist.train(data_dir=str(shared_path("data", "mnist")), run_dir=str(tmp_path / "occluded"), epochs=1,
                         num_train=8, num_test=4, variant="temporal", conv_units=(4,), dense_units=8, batch_size=8,
                         frame_size=16, verbose=0)
    textured_mnist.train(run_dir=str(tmp_path / "textured"), num_train=8, num_test=4, n_groups=2, n_iters=1, epochs=1,
                         batch_size=8, conv_units=4, dense_units=8, pool=2, verbose=0)
    assert calls == ["test", "test"]


def test_the_history_plot_of_a_single_epoch_shows_its_points(tmp_path, monkeypatch):
    # A run of one epoch drew every curve as a line through one point: the PNG showed
    # legends over empty axes. Short histories mark every epoch; long ones stay lines.
    from matplotlib.colors import to_rgb

    from applications import demo, plotting

    figures = []
    save = plotting.save_and_close
    monkeypatch.setattr(plotting, "save_and_close", lambda fig, path, **kw: (figures.append(fig), save(fig, path, **kw)))
    demo.plot_history({"loss": [0.7], "accuracy": [0.6], "val_loss": [0.8], "val_accuracy": [0.5]},
                      str(tmp_path / "one.png"))
    (fig,) = figures
    for ax in fig.axes:
        assert len(ax.lines) == 2
        for line in ax.lines:
            assert line.get_marker() not in (None, "None", "", " ") and line.get_markersize() > 0
    # the drawn axes hold each curve's colour (without the legends, whose swatches have it
    # too): before, not one pixel of it
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for ax in fig.axes:
        ax.get_legend().remove()

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    image = np.asarray(canvas.buffer_rgba())[..., :3] / 255.0
    for line in fig.axes[0].lines:
        pixels = np.all(np.abs(image - np.array(to_rgb(line.get_color()))) < 0.05, axis=-1).sum()
        assert pixels > 20, (line.get_label(), pixels)
    figures.clear()
    demo.plot_history({"loss": list(np.linspace(1, 0.1, 100))}, str(tmp_path / "long.png"))
    assert figures[0].axes[0].lines[0].get_marker() in (None, "None", "", " ")
