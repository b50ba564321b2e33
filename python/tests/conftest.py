"""Shared pytest fixtures of the mamba_ssu package tests.

GPU tests take the `gpu` fixture: it returns the CUDA device, skips the test on a machine
without a GPU, and FAILS instead when MAMBA_SSU_REQUIRE_GPU=1 (the GPU host's setting), so that
a GPU test can never pass there by skipping.
"""

import os

import pytest
import torch


@pytest.fixture
def gpu():
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    if os.environ.get("MAMBA_SSU_REQUIRE_GPU") == "1":
        pytest.fail("MAMBA_SSU_REQUIRE_GPU=1 but torch.cuda.is_available() is False")
    pytest.skip("requires a CUDA GPU")
