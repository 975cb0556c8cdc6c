"""The command-line protocol of capsule text classification (``applications/registry.py``).

    keras-capsules train text_classification --dataset sst2 --data-dir ../shared/data/sst
    keras-capsules train text_classification --dataset ag_news --data-dir ~/tensorflow_datasets
    keras-capsules evaluate text_classification --dataset sst2 --data-dir ../shared/data/sst \\
        --model runs/text_classification/model.keras
    keras-capsules tune text_classification --dataset sst2 --data-dir ../shared/data/sst

TFDS sets (``ag_news``, ``yelp_polarity``) must be prepared in ``--data-dir``: they are
never downloaded. ``evaluate`` reads the vocabulary ``train`` wrote beside the model.
"""

from applications.text_classification import data as data_lib
from applications.text_classification import model as model_lib
from applications.text_classification import recipe
from applications.text_classification.options import INTRA_OP_THREADS  # noqa: F401  (the protocol's: registry.py)

MODEL_OPTIONS = ("embedding_dim", "num_codebooks", "gru_units", "dropout", "capsule_dim",
                 "class_capsule_dim", "n_iters")


def add_arguments(parser, command):
    """Text classification's options for ``train``, ``evaluate`` and ``tune``."""
    from applications.arguments import positive_float, positive_int, rate
    if command == "train":
        parser.set_defaults(epochs=10, batch_size=30)  # the paper's recipe (recipe.train)

    recorded = " the one `train` recorded beside the model, else" if command == "evaluate" else ""
    parser.add_argument("--dataset", choices=data_lib.DATASETS, default=None if command == "evaluate" else "sst2",
                        help=f"(default:{recorded} sst2)")
    parser.add_argument("--data-dir", default=None,
                        help="the folder of the SST tree files (sst2, sst5), or the TFDS data directory "
                        "holding a prepared ag_news_subset / yelp_polarity_reviews (never downloaded)"
                        + (" (default for SST: the folder `train` recorded beside the model)"
                           if command == "evaluate" else ""))
    parser.add_argument("--limit", type=positive_int, default=None,
                        help="score only the first N test examples (default: the --limit `train` recorded "
                        "beside the model, else all; a larger N: all)" if command == "evaluate"
                        else "use only the first N examples of every split (quick runs)")
    parser.add_argument("--max-length", type=positive_int,
                        default=None if command == "evaluate" else data_lib.MAX_LENGTH,
                        help=f"tokens kept per text (default:{recorded} {data_lib.MAX_LENGTH})")
    if command in ("train", "tune"):
        parser.add_argument("--vocab-size", type=positive_int, default=60000,
                            help="largest id space, padding and OOV included (default: %(default)s)")
        parser.add_argument("--phrases", action="store_true", help="SST: train on every labelled phrase")
        parser.add_argument("--embedding", choices=model_lib.EMBEDDINGS, default="compositional")
        parser.add_argument("--embedding-dim", type=positive_int, default=64, help="word vector size D")
        parser.add_argument("--num-codebooks", type=positive_int, default=8,
                            help="codebooks M of the compositional embedding")
    if command == "train":
        parser.add_argument("--routing", choices=model_lib.ROUTINGS, default="kmeans")
        parser.add_argument("--learning-rate", type=positive_float, default=1e-3)
        parser.add_argument("--gru-units", type=positive_int, default=128, help="units of each GRU direction")
        parser.add_argument("--dropout", type=rate, default=0.5,
                            help="between the GRU layers, in [0, 1) (default: %(default)s)")
        parser.add_argument("--capsule-dim", type=positive_int, default=8)
        parser.add_argument("--class-capsule-dim", type=positive_int, default=16)
        parser.add_argument("--n-iters", type=positive_int, default=3, help="routing iterations")
    elif command == "evaluate":
        parser.add_argument("--vocabulary", default=None,
                            help="the vocab.txt of the model (default: the one beside --model)")


def run_train(args, strategy):
    from applications.arguments import train_options

    # Bad model options fail before the run directory is made or any data is read.
    model_lib.check_arguments(routing=args.routing, embedding=args.embedding,
                              **{name: getattr(args, name) for name in MODEL_OPTIONS})
    data_lib.check_phrases(args.dataset, args.phrases)  # (was reported after missing data)
    data_lib.require_data(args.dataset, args.data_dir)
    result = recipe.train(
        dataset=args.dataset,
        data_dir=args.data_dir,
        routing=args.routing,
        embedding=args.embedding,
        learning_rate=args.learning_rate,
        vocab_size=args.vocab_size,
        max_length=args.max_length,
        phrases=args.phrases,
        limit=args.limit,
        **{name: getattr(args, name) for name in MODEL_OPTIONS},
        **train_options(args, strategy),
    )
    # One parameter count for the summary line; both embeddings' counts stay in metrics.json.
    return {**result, "parameters": result["parameters"][args.embedding]["total"],
            "parameter_report": result["parameters"]}


def run_evaluate(args, strategy):
    from applications import distribute

    dataset = args.dataset or recipe.recorded_dataset(args.model)  # the data are checked first
    # (SST's folder: the one train recorded unless given, as recipe.evaluate takes it)
    data_lib.require_data(dataset, args.data_dir if args.data_dir is not None
                          else recipe.recorded_data_dir(args.model, dataset))
    return recipe.evaluate(args.model, dataset, args.data_dir, args.vocabulary, args.limit,
                           distribute.global_batch_size(args.batch_size, strategy), args.max_length, strategy,
                           verbose=0 if args.quiet else 1)
