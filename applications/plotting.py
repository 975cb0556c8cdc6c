"""What the applications' ``plot_*`` functions share: the pyplot import, argument checks
and the atomic save.

* :func:`pyplot` imports ``matplotlib.pyplot`` with the non-interactive ``Agg``
  backend, on first use, so that importing ``applications`` does not need matplotlib
  (Keras may still import it by itself where it is installed).
* :func:`positive_count` checks a "how many to draw" argument.
* :func:`save_and_close` lays the figure out, writes it through
  :func:`applications.fault_tolerance.save_figure_atomically` (a reader never sees a
  half-written image) and closes it, even when saving fails.

A plotting function reads::

    plt = plotting.pyplot()
    plotting.positive_count("num_images", num_images)
    fig, axes = plt.subplots(...)
    ...
    plotting.save_and_close(fig, path, dpi=100, format="png")
"""

import numpy as np

from applications import fault_tolerance


def pyplot():
    """Returns ``matplotlib.pyplot`` with the ``Agg`` backend selected (no display needed).

    matplotlib is imported here, not when this module is imported.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    return int(value)


def save_and_close(fig, path, tight_layout=True, **savefig_kwargs):
    """Writes ``fig`` to ``path`` atomically, then closes it (whatever happens).

    Args:
        fig: a matplotlib figure (from :func:`pyplot`).
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
        pyplot().close(fig)
    return path
