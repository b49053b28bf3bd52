import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session")
def ctx():
    import flashcl
    # the rules' plans, as the C suites test them ($FLASHCL_TEST_DEVICE as theirs)
    return flashcl.Context(os.environ.get("FLASHCL_TEST_DEVICE"), tuned=False)


@pytest.fixture
def rng():
    seed = int(os.environ.get("FLASHCL_TEST_SEED", "0") or 0) % 2**32
    return np.random.default_rng(seed)
