"""The quickstart notebook runs headless, top to bottom, without a cell error."""
import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "notebooks", "quickstart.ipynb")


def test_quickstart_notebook_runs(tmp_path, fashion_mnist):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env_epochs = os.environ.get("KILN_QUICKSTART_EPOCHS")
    os.environ["KILN_QUICKSTART_EPOCHS"] = "1"  # one epoch is enough to check every cell
    try:
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": str(tmp_path)}})
        client.execute()
    finally:
        if env_epochs is None:
            os.environ.pop("KILN_QUICKSTART_EPOCHS")
        else:
            os.environ["KILN_QUICKSTART_EPOCHS"] = env_epochs
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "test accuracy" in outputs and "served at" in outputs
    images = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                 if "image/png" in o.get("data", {}))
    assert images >= 3  # samples, loss curve, confusion matrix
