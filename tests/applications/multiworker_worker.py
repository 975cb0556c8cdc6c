"""One worker of the multi-worker test: trains the demo through the CLI, dumps weights.

    TF_CONFIG=... python tests/applications/multiworker_worker.py RUN_DIR OUT.npz [CLI options]
"""

import os
import sys

import numpy as np


def main():
    run_dir, out = sys.argv[1], sys.argv[2]
    from applications import __main__ as cli
    from applications import distribute

    import keras

    fit = keras.Model.fit

    def fit_and_record_the_initial_weights(model, *args, **kwargs):
        np.savez(out[:-len(".npz")] + "-initial.npz", *[keras.ops.convert_to_numpy(w) for w in model.trainable_weights])
        return fit(model, *args, **kwargs)

    keras.Model.fit = fit_and_record_the_initial_weights

    code = cli.main(["train", "demo", "--strategy", "multiworker", "--run-dir", run_dir, *sys.argv[3:]])
    if code:
        return code
    model = keras.saving.load_model(os.path.join(distribute.output_dir(run_dir), "model.keras"))
    np.savez(out, *[keras.ops.convert_to_numpy(w) for w in model.weights])
    np.savez(out[:-len(".npz")] + "-trained.npz", *[keras.ops.convert_to_numpy(w) for w in model.trainable_weights])
    return 0


if __name__ == "__main__":
    sys.exit(main())
