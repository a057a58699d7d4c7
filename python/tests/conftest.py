import os

import numpy as np
import pytest

import kiln

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


@pytest.fixture(autouse=True)
def _seeded():
    kiln.manual_seed(0)
    np.random.seed(0)
    kiln.set_context(mode=kiln.PYNATIVE_MODE)
    yield
    kiln.set_context(mode=kiln.PYNATIVE_MODE, device_target="CPU")


@pytest.fixture
def fashion_mnist():
    if not os.path.isdir(FASHION_MNIST):
        pytest.fail("Fashion-MNIST is missing: apt-get install dataset-fashion-mnist (scripts/install-deps.sh does)")
    return FASHION_MNIST
