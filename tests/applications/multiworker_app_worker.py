"""One worker of the multi-worker application tests: ``train``, then ``evaluate``, of one
application through the command line under ``--strategy multiworker``.

    TF_CONFIG=... python tests/applications/multiworker_app_worker.py SPEC_JSON

``SPEC_JSON`` holds ``application``, ``run_dir``, ``train`` (the options of ``train``),
``evaluate`` (those of ``evaluate``, or null to skip it) and ``mock_tfds`` (a number of
examples for ``tfds.testing.mock_data``, or null). ``evaluate`` reads the model this
worker wrote (``distribute.output_dir``: the chief's in ``RUN_DIR``, the others' below
it) and its printed metrics go to ``<output dir>/evaluate.json``. Exits with the
command line's first non-zero code.
"""

import contextlib
import io
import json
import os
import sys
import time


def main():
    spec = json.loads(sys.argv[1])
    from applications import __main__ as cli
    from applications import distribute

    context = contextlib.nullcontext()
    if spec.get("mock_tfds"):
        import tensorflow_datasets as tfds

        from applications import tfds_data

        tfds_data.require_prepared = lambda name, data_dir=None: None
        context = tfds.testing.mock_data(num_examples=spec["mock_tfds"])
    name, run_dir = spec["application"], spec["run_dir"]
    common = ["--strategy", "multiworker"]
    start = time.monotonic()
    with context:
        code = cli.main(["train", name, *spec["train"], *common, "--run-dir", run_dir])
        print(f"train: exit code {code} after {time.monotonic() - start:.1f} s", flush=True)
        if code or spec.get("evaluate") is None:
            return code
        out = distribute.output_dir(run_dir)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = cli.main(["evaluate", name, *spec["evaluate"], *common,
                             "--model", os.path.join(out, "model.keras")])
        print(printed.getvalue())
        print(f"evaluate: exit code {code} after {time.monotonic() - start:.1f} s", flush=True)
        if code == 0:
            with open(os.path.join(out, "evaluate.json"), "w") as f:
                f.write(printed.getvalue())
    return code


if __name__ == "__main__":
    sys.exit(main())
