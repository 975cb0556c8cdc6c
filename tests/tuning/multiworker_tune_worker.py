"""One worker of the multi-worker search test: ``keras-capsules tune`` under MultiWorkerMirroredStrategy.

    TF_CONFIG=... python tests/tuning/multiworker_tune_worker.py [tune options]
"""

import sys


def main():
    from applications import __main__ as cli

    return cli.main(["tune", *sys.argv[1:], "--strategy", "multiworker"])


if __name__ == "__main__":
    sys.exit(main())
