"""The SST application's search space: the capsules and routing on a frozen transformer.

* ``n_iters`` 2-4: EM iterations of both routings (the paper: 3); one iteration is
  left out, the class scores would not depend on the votes.
* ``hidden_capsules`` 16/32/64: capsules of the middle layer (the paper: 64), the
  number of "parts" the token-and-layer capsules are routed to.
* ``capsule_dim`` 1-4: routed capsules are ``1 x capsule_dim`` (the paper: 2), and
  ``hidden_dim`` 16/32/64/128: the input capsules are ``1 x hidden_dim`` (64). The vote
  tensor grows with their product.
* ``max_lr`` 1e-4 to 2e-3 (log scale): the peak of the one-cycle schedule (5e-4), and
  ``mixup_alpha`` 0/0.2/0.4: the regime's only regulariser (the model has no dropout).

The transformer is frozen: its hidden states are embedded once per split (cached in
``--cache-dir``, default ``DIRECTORY/cache``) before the first trial, and every trial
trains the routing model on them. The objective is the accuracy on the dev sentences.
"""


from applications import checks, distribute, sst, sst_trees
from applications.errors import InputError
from tuning.base import DatasetHyperModel


class SSTHyperModel(DatasetHyperModel):
    """HyperModel of ``applications.sst``.

    Args:
        data_dir: directory of the SST tree files.
        granularity: ``"5"`` (SST-5/R) or ``"2"`` (SST-2/R).
        preset: keras-hub preset (name or folder) of the frozen transformer.
        cache_dir: the embedding cache.
        train_on: ``"phrases"`` or ``"sentences"``.
        max_train, max_eval: keep the first training examples / dev sentences only.
        max_length: tokens kept per text.
        **kwargs: ``batch_size``, ``seed``, ``epochs`` of :class:`DatasetHyperModel`.

    Raises:
        InputError (a ValueError): ``granularity`` not ``"5"`` or ``"2"``, ``train_on``
            not ``"phrases"`` or ``"sentences"``, ``max_train`` or ``max_eval`` neither
            None nor an integer >= 1.
    """

    application = "sst"

    def __init__(self, data_dir, granularity="5", preset=sst.DEFAULT_PRESET, cache_dir="cache",
                 train_on="phrases", max_train=None, max_eval=None, max_length=sst.DEFAULT_MAX_LENGTH,
                 **kwargs):
        super().__init__(**kwargs)
        # checked here, before the (slow) embedding, as sst.train checks them: train_on="words"
        # trained on the sentences, and max_train=0 was refused as "`requests['train'] limit`"
        if train_on not in ("phrases", "sentences"):
            raise InputError(f"`train_on` must be 'phrases' or 'sentences'. Received: train_on={train_on!r}")
        max_train, max_eval = (None if value is None else checks.integer_at_least(name, value, 1)
                               for name, value in (("max_train", max_train), ("max_eval", max_eval)))
        max_length = sst.check_max_length(max_length)  # (max_length=1 was refused only by the data)
        self.data_dir, self.granularity, self.preset, self.cache_dir = data_dir, str(granularity), preset, cache_dir
        self.train_on, self.max_train, self.max_eval, self.max_length = train_on, max_train, max_eval, max_length
        self.num_classes = sst_trees.num_classes(self.granularity)

    @classmethod
    def options_from_args(cls, args):
        from applications.arguments import cache_dir_of

        return {"data_dir": args.data_dir, "granularity": args.granularity, "preset": args.preset,
                "cache_dir": cache_dir_of(args), "train_on": args.train_on, "max_train": args.max_train,
                "max_eval": args.max_eval, "max_length": args.max_length}

    def load_data(self):
        sst_trees.require_split_files(self.data_dir, ("train", "dev"))
        requests = {"train": ("train", self.train_on == "phrases", self.max_train),
                    "dev": ("dev", False, self.max_eval)}
        return sst.embed_splits(self.data_dir, self.granularity, requests, self.preset, self.cache_dir,
                                self.max_length, verbose=self.verbose)

    def build(self, hp):
        embedded, labels = self.prepare()["train"]
        model = sst.build_model(
            embedded.num_layers,
            embedded.width,
            self.num_classes,
            hidden_dim=hp.Choice("hidden_dim", [16, 32, 64, 128], default=64),
            hidden_capsules=hp.Choice("hidden_capsules", [16, 32, 64], default=64),
            capsule_dim=hp.Int("capsule_dim", 1, 4, default=2),
            n_iters=hp.Int("n_iters", 2, 4, default=3),
        )
        max_lr = hp.Float("max_lr", 1e-4, 2e-3, sampling="log", default=5e-4)
        hp.Choice("mixup_alpha", [0.0, 0.2, 0.4], default=0.2)  # read by `datasets`
        steps = distribute.even_batch_count(len(labels), self.batch_size, self.replicas) * self.trial_epochs(hp)
        return sst.compile_model(model, steps, max_lr=max_lr)

    def datasets(self, hp, data):
        train = sst.training_dataset(*data["train"], self.num_classes, self.batch_size,
                                     hp.get("mixup_alpha") or None, self.seed, replicas=self.replicas)
        return train, sst.make_dataset(*data["dev"], self.num_classes, self.batch_size)

    def recorded_options(self):
        # evaluate embeds the sentences of the same task with the same preset and max_length
        # by default (through the cache beside the model: DIRECTORY/cache, the search's
        # default --cache-dir)
        return {"task": f"SST-{self.granularity}/R", "granularity": self.granularity, "preset": str(self.preset),
                "max_length": self.max_length, "train_on": self.train_on}


__all__ = ["SSTHyperModel"]
