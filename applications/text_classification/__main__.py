"""``python -m applications.text_classification``: train on one dataset."""

import sys

from applications.text_classification.recipe import main

if __name__ == "__main__":
    from applications.errors import run_main

    sys.exit(run_main(main, "python -m applications.text_classification"))
