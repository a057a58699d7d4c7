"""Datasets the MindSpore way: counts that follow the stage they come after, keywords that are
checked, and iterators that can be dropped mid-epoch."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kiln.dataset import NumpySlicesDataset


def rows(n=1000):
    x = np.arange(n, dtype=np.float32).reshape(n, 1)
    return NumpySlicesDataset((x, np.arange(n, dtype=np.int64)), ["x", "y"], shuffle=False)


def first_values(ds):
    return [int(b[1].numpy().reshape(-1)[0]) for b in ds.create_tuple_iterator()]


def test_take_and_skip_count_the_rows_of_the_stage_they_follow():
    # 1000 samples in batches of 64: 16 batches, the last of 40.
    assert len(list(rows().batch(64).take(10))) == 10
    assert rows().batch(64).take(10).get_dataset_size() == 10
    skipped = rows().batch(64).skip(10)
    assert skipped.get_dataset_size() == 6
    assert first_values(skipped)[0] == 640
    assert len(list(rows().take(100).batch(64))) == 2
    assert first_values(rows().skip(5).skip(5).batch(10))[:2] == [10, 20]
    assert first_values(rows().batch(10).skip(2).take(3)) == [20, 30, 40]
    assert first_values(rows().take(50).batch(10).skip(4).take(3)) == [40]
    with pytest.raises(ValueError, match="0 or more"):
        rows().take(-1)


def test_unknown_keywords_are_errors_not_silently_dropped():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'shufle'.*did you mean shuffle"):
        NumpySlicesDataset((np.zeros((4, 1)),), shufle=False)
    with pytest.raises(TypeError, match="unexpected keyword argument 'drop_reminder'"):
        rows().batch(8, drop_reminder=True)
    with pytest.raises(ValueError, match="per_batch_map= is not supported"):
        rows().batch(8, per_batch_map=lambda x, y, info: (x, y))
    # num_samples keeps that many samples, as MindSpore's sources do.
    x = np.arange(50, dtype=np.float32).reshape(50, 1)
    limited = NumpySlicesDataset((x, np.zeros(50, np.int64)), shuffle=False, num_samples=12)
    assert limited.batch(5).get_dataset_size() == 3
    # MindSpore keywords that change nothing here are accepted.
    assert rows().map(lambda v: v, "x", python_multiprocessing=True).batch(8, max_rowsize=4).get_dataset_size() == 125


def test_an_iterator_dropped_mid_epoch_with_a_python_transform_does_not_hang():
    # In a child process, so that a deadlock fails this test instead of hanging the suite.
    code = textwrap.dedent("""
        import numpy as np, time
        from kiln.dataset import NumpySlicesDataset
        def slow(v):
            time.sleep(0.002)
            return v * 2
        x = np.arange(4000, dtype=np.float32).reshape(-1, 1)
        ds = NumpySlicesDataset((x, np.zeros(4000, np.int64)), ["x", "y"]).map(slow, "x").batch(16)
        for i in range(20):
            it = ds.create_dict_iterator()
            next(it)
            del it
        print("done")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "done"
