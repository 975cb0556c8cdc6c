"""``python -m applications.text_classification``: train on one dataset."""

import sys

from applications.text_classification.recipe import main

if __name__ == "__main__":
    sys.exit(main())
