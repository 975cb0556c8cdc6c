"""What the applications' ``plot_*`` functions share: figures, colour maps, argument
checks and the atomic save.

* :func:`subplots` makes a ``matplotlib.figure.Figure`` and its axes directly, without
  ``matplotlib.pyplot``: drawing a plot never changes the process's matplotlib
  backend (a Jupyter notebook keeps its inline plots, a desktop session its windows)
  and never registers a figure with pyplot, so nothing is left open and no display
  is needed. matplotlib is imported on first use, so that importing ``applications``
  does not need it (Keras may still import it by itself where it is installed).
* :func:`colormap` looks a matplotlib colour map up by name.
* :func:`positive_count` checks a "how many to draw" argument.
* :func:`save_and_close` lays the figure out, writes it through
  :func:`applications.fault_tolerance.save_figure_atomically` (a reader never sees a
  half-written image) and closes it, even when saving fails.

A plotting function reads::

    plotting.positive_count("num_images", num_images)
    fig, axes = plotting.subplots(2, 3, figsize=(6, 4), squeeze=False)
    ...
    plotting.save_and_close(fig, path, dpi=100, format="png")
"""

import sys

import numpy as np

from applications import fault_tolerance
from applications.errors import InputError


def subplots(nrows=1, ncols=1, *, figsize=None, dpi=None, **kwargs):
    """A new figure and a grid of axes, as ``matplotlib.pyplot.subplots`` but without pyplot.

    Args:
        nrows, ncols: the grid of axes.
        figsize: ``(width, height)`` in inches (None: matplotlib's default).
        dpi: the figure's resolution (None: matplotlib's default).
        **kwargs: passed to ``Figure.subplots`` (``squeeze``, ``sharex``, ...).

    Returns:
        ``(fig, axes)``: a ``matplotlib.figure.Figure`` and one ``Axes`` or an array of
        them. The figure renders with the format's own canvas when saved (PNG: Agg),
        whatever backend the process uses.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def colormap(name):
    """The matplotlib colour map called ``name`` (e.g. ``"tab10"``), without pyplot."""
    import matplotlib

    return matplotlib.colormaps[name]


def positive_count(name, value):
    """Checks that ``value`` is a positive integer (Python or numpy, not a bool).

    Args:
        name: the argument's name, quoted in the error.
        value: the value to check.

    Returns:
        ``value`` as a Python ``int``.

    Raises:
        ValueError: ``"`name` must be a positive integer. Received: name=value"``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    return int(value)


def save_and_close(fig, path, tight_layout=True, **savefig_kwargs):
    """Writes ``fig`` to ``path`` atomically, then closes it (whatever happens).

    Args:
        fig: a matplotlib figure (from :func:`subplots`, or a pyplot figure, which
            is then closed in pyplot too).
        path: output file; the format comes from its suffix unless ``format=`` is given.
        tight_layout: whether to call ``fig.tight_layout()`` first. Default True.
        **savefig_kwargs: passed to ``fig.savefig`` (e.g. ``dpi=100, format="png"``).

    Returns:
        ``path``.
    """
    try:
        if tight_layout:
            fig.tight_layout()
        fault_tolerance.save_figure_atomically(fig, path, **savefig_kwargs)
    finally:
        # a figure of ours belongs to no pyplot figure manager: dropping it frees it. A
        # pyplot figure (a caller's) is closed there, without importing pyplot here.
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None:
            plt.close(fig)
    return path
