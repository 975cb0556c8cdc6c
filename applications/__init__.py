"""keras-capsules applications: data pipelines, model builders and the command line.

Importing this package sets the runtime default of ``keras_capsules`` before anything
loads TensorFlow, without importing ``keras_capsules`` (which loads TensorFlow: seconds,
and lines of TensorFlow's start-up on stderr, for ``keras-capsules --help``): unless the
user chose otherwise, TensorFlow's oneDNN kernels are off (``TF_ENABLE_ONEDNN_OPTS=0``,
see ``keras_capsules/__init__.py``, whose decision this repeats: the same variable, set
only when the user did not set it and TensorFlow is not loaded yet;
``tests/applications/test_cli_startup.py`` checks that both decide alike). So the
default holds for every application, the command line, ``tuning`` and the benchmarks,
whichever of them loads TensorFlow first. The warning for TensorFlow loaded first stays
``keras_capsules``'s, which every application imports.
"""

import os as _os
import sys as _sys

#: ``keras_capsules.ONEDNN_VARIABLE``
_ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
if "tensorflow" not in _sys.modules:
    _os.environ.setdefault(_ONEDNN_VARIABLE, "0")
