"""Sort-of-CLEVR's HyperModel: options checked when it is made."""

import re

import numpy as np
import pytest

from applications import sort_of_clevr


def test_the_hypermodel_refuses_fewer_validation_questions_than_the_data_need():
    # Audit (mac): validation_examples=1 was taken here and refused only when the search read
    # the data (sort_of_clevr.validation_data needs a question of each kind: at least 2).
    from applications.errors import InputError
    from tuning.sort_of_clevr import SortOfClevrHyperModel

    with pytest.raises(InputError, match=re.escape("`validation_examples` must be an integer >= 2. "
                                                   "Received: validation_examples=1")):
        SortOfClevrHyperModel(validation_examples=1)
    with pytest.raises(InputError, match=re.escape("Received: validation_examples=1")):
        sort_of_clevr.validation_data(1)
    hypermodel = SortOfClevrHyperModel(validation_examples=np.int64(2))
    inputs, answers = hypermodel.load_data()
    assert hypermodel.validation_examples == 2 and len(answers) == 2 and len(inputs["question"]) == 2
