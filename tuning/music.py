"""The music application's search space: the levels of the Recurrent Ladder.

* ``levels`` 1-3 and ``units_0`` .. ``units_2`` 32/64/128/256: how many dense ladder
  levels there are and how wide each one is, bottom to top (the default, 128 and 64,
  is a narrower version of the paper's Table 10). ``units_k`` is conditional on
  ``levels > k`` (``tuning.base.level_widths``): a trial without level ``k`` neither
  draws nor records its width; ``--fixed`` can still pin it (for the trials that have
  the level).
* ``encoder`` gated/lstm: the encoder cells of every level.
* ``decoder_to_encoder``: the ladder's feedback connections (off: no top-down
  information reaches the next step's encoder).
* ``input_dropout`` 0-0.3 on the input rolls (default 0, as
  ``applications.music.build_model``; the ladder's own dropout and zoneout stay 0),
  and ``learning_rate`` 1e-4 to 1e-2 (log scale, default 1e-3, as
  ``applications.music.compile_model``) of Adam.
* ``readout`` independent/nade: one Bernoulli per key given the past (the paper's),
  or the ``KeyNADE`` read-out that also conditions each key on the lower keys of
  its step (the trial's data then feed the targets in as a second input).

The objective is ``val_nll_per_step``: the exact NLL per real (windowed) step of the
validation chorales, summed over keys (``applications.music.PianoRollNLLPerStep``; the
``val_loss`` Keras reports weighs its batches by their windows, not their real steps).
"""

import os

import keras_tuner

from applications import checks, music
from tuning.base import DatasetHyperModel, level_widths, stepped_choice

WIDTHS = (32, 64, 128, 256)
#: the default width of every level the search can build (``units_0`` .. ``units_2``)
DEFAULT_UNITS = (128, 64, 64)
MAX_LEVELS = len(DEFAULT_UNITS)


class MusicHyperModel(DatasetHyperModel):
    """HyperModel of ``applications.music`` (JSB Chorales).

    Args:
        data_dir: the JSON file of the chorales or its folder (None: the shared copy).
        limit: use only the first ``limit`` chorales of every split.
        window: train and validate on windows of that many steps (None: whole chorales);
            one longer than the longest chorale read holds every chorale whole, and is cut
            to it (as ``applications.music.train`` does).
        **kwargs: ``batch_size``, ``seed``, ``epochs`` of :class:`DatasetHyperModel`.

    Raises:
        InputError (a ValueError): ``window`` neither None nor an integer >= 1.
    """

    application = "music"
    objective = keras_tuner.Objective(music.MONITOR, "min")

    def __init__(self, data_dir=None, limit=None, window=32, **kwargs):
        super().__init__(**kwargs)
        # checked here: window=0 built a model of whole chorales (`self.window or longest`),
        # whose every trial then failed on the windows of its datasets
        if window is not None:
            window = checks.integer_at_least("window", window, 1)
        self.data_dir, self.limit, self.window = data_dir, limit, window

    @classmethod
    def options_from_args(cls, args):
        return {"data_dir": args.data_dir, "limit": args.limit, "window": args.window}

    def load_data(self):
        return music.load_rolls(self.data_dir, self.limit)

    def recorded_options(self):
        # the chorales the trials trained and were scored on, as `train` records them:
        # `evaluate --model` of the search scored the shared copy instead (helper-182).
        # Not --limit: it only shortened the search (its trials never saw a test chorale),
        # so evaluate scores every chorale of the split unless told --limit
        return {"data_path": None if self.data_dir is None else os.path.abspath(self.data_dir)}

    def _window(self, longest):
        """The window of the trials (None: whole chorales), at most ``longest`` steps: a
        longer one holds every chorale whole, as a window of the longest does, but its
        model was unrolled over all its steps (``--window 1000 --limit 2``: 1,000 steps
        for chorales of at most 129, every trial minutes longer)."""
        return None if self.window is None else min(self.window, longest)

    def build(self, hp):
        units = level_widths(hp, "levels", "units", WIDTHS, DEFAULT_UNITS, default_levels=2)
        _, longest = self.prepare()
        model = music.build_model(
            self._window(longest) or longest,
            units=units,
            encoder=hp.Choice("encoder", ["gated", "lstm"], default="gated"),
            decoder_to_encoder=hp.Boolean("decoder_to_encoder", default=True),
            input_dropout=stepped_choice(hp, "input_dropout", 0.0, 0.3, 0.05, default=0.0),
            readout=hp.Choice("readout", list(music.READOUTS), default="independent"),
        )
        return music.compile_model(model, hp.Float("learning_rate", 1e-4, 1e-2, sampling="log", default=1e-3))

    def datasets(self, hp, data):
        rolls, longest = data
        nade = hp.get("readout") == "nade"
        window = self._window(longest)
        train = music.make_dataset(rolls["train"], self.batch_size, longest, True, self.seed, window,
                                   targets_as_input=nade, replicas=self.replicas)
        valid = music.make_dataset(rolls["valid"], self.batch_size, longest, window=window,
                                   targets_as_input=nade)
        return train, valid


__all__ = ["MusicHyperModel"]
