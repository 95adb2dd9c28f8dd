"""The CUDA/NCCL build switch in setup.py and how a build reports itself.

Runs without a GPU: it checks which sources each build compiles, that a forced
CUDA build names what is missing, and what --check-build prints for each kind.
"""
import io
import json
import os

from tf_ring.run import check_build

from conftest import REPO as ROOT


def load_setup_functions():
    """setup.py's helper functions, without running setup()."""
    source = open(os.path.join(ROOT, "setup.py")).read()
    head = source.split("\nSOURCES = ")[0]
    namespace = {"__file__": os.path.join(ROOT, "setup.py"), "__name__": "setup_under_test"}
    exec(compile(head, "setup.py", "exec"), namespace)
    return namespace


def test_gpu_sources_are_left_out_of_a_cpu_build():
    s = load_setup_functions()
    gpu = ["cc/common/transport/gpu/cuda_check.cc", "cc/common/collectives/nccl/nccl_allreduce.cc",
           "cc/tensorflow/gpu_kernels.cc"]
    cpu = ["cc/common/engine.cc", "cc/common/collectives/mpi/allreduce.cc", "cc/tensorflow/kernels.cc",
           "cc/common/transport/device_transport.cc"]
    assert all(os.path.exists(os.path.join(ROOT, p)) for p in gpu + cpu)
    assert [p for p in gpu if s["_is_gpu_source"](p)] == gpu
    assert [p for p in cpu if s["_is_gpu_source"](p)] == []


def test_forcing_cpu_skips_discovery(monkeypatch):
    s = load_setup_functions()
    monkeypatch.setenv("TF_RING_WITH_NCCL", "0")
    assert s["_gpu_build_config"]("/nonexistent") is None


def test_forcing_cuda_without_cuda_names_every_missing_piece(tmp_path, monkeypatch):
    s = load_setup_functions()
    monkeypatch.setenv("TF_RING_WITH_NCCL", "1")
    monkeypatch.setenv("TF_RING_CUDA_HOME", str(tmp_path / "no_cuda"))
    monkeypatch.setenv("TF_RING_NCCL_HOME", str(tmp_path / "no_nccl"))
    monkeypatch.setitem(s, "_site_dirs", lambda: [str(tmp_path)])
    try:
        s["_gpu_build_config"](str(tmp_path / "tf_include"))
    except SystemExit as e:
        text = str(e)
    else:
        raise AssertionError("a forced CUDA build with nothing installed did not fail")
    for piece in ("cuda_runtime_api.h", "nccl.h", "libcudart.so", "libnccl.so",
                  "CUDA-enabled TensorFlow", "TF_RING_WITH_NCCL=0"):
        assert piece in text, (piece, text)


def test_auto_picks_cuda_when_everything_is_there(tmp_path, monkeypatch):
    s = load_setup_functions()
    monkeypatch.delenv("TF_RING_WITH_NCCL", raising=False)
    monkeypatch.delenv("TF_RING_CUDA_HOME", raising=False)
    monkeypatch.delenv("TF_RING_NCCL_HOME", raising=False)
    nvidia = tmp_path / "site" / "nvidia"
    (nvidia / "cuda_runtime" / "include").mkdir(parents=True)
    (nvidia / "cuda_runtime" / "include" / "cuda_runtime_api.h").write_text(
        "#define CUDART_VERSION  12090\n")
    (nvidia / "cuda_runtime" / "include" / "crt").mkdir()
    (nvidia / "cuda_runtime" / "include" / "crt" / "host_defines.h").write_text("")
    (nvidia / "cuda_runtime" / "lib").mkdir()
    (nvidia / "cuda_runtime" / "lib" / "libcudart.so.12").write_text("")
    (nvidia / "nccl" / "include").mkdir(parents=True)
    (nvidia / "nccl" / "include" / "nccl.h").write_text(
        "#define NCCL_MAJOR 2\n#define NCCL_MINOR 27\n#define NCCL_PATCH 7\n")
    (nvidia / "nccl" / "lib").mkdir()
    (nvidia / "nccl" / "lib" / "libnccl.so.2").write_text("")
    monkeypatch.setitem(s, "_site_dirs", lambda: [str(tmp_path / "site")])
    tf_include = tmp_path / "tf_include"
    assert s["_gpu_build_config"](str(tf_include)) is None  # a CPU-only TensorFlow: CPU build
    (tf_include / "third_party" / "gpus" / "cuda" / "include").mkdir(parents=True)
    (tf_include / "xla" / "stream_executor").mkdir(parents=True)
    (tf_include / "xla" / "stream_executor" / "stream.h").write_text("")
    config = s["_gpu_build_config"](str(tf_include))
    assert config["info"]["build"] == "cuda"
    assert config["info"]["cuda_version"] == "12.9"
    assert config["info"]["nccl_version"] == "2.27.7"
    assert "-DTF_RING_CUDA=1" in config["engine_compile"]
    assert "-l:libnccl.so.2" in config["link"] and "-l:libcudart.so.12" in config["link"]


def report(tmp_path, **info):
    (tmp_path / "_tf_ring.so").write_text("")
    path = tmp_path / "_build_info.json"
    path.write_text(json.dumps(info))
    out, err = io.StringIO(), io.StringIO()
    check_build.check_build(info_path=str(path), package_dir=str(tmp_path), out=out, err=err)
    return out.getvalue()


def test_check_build_names_nccl_and_cuda_of_a_cuda_build(tmp_path):
    out = report(tmp_path, build="cuda", cuda_version="12.9", nccl_version="2.27.7",
                 nccl="/x/libnccl.so.2")
    assert "[X] NCCL 2.27.7 (CUDA 12.9 build)" in out
    assert "build:                  CUDA 12.9, NCCL 2.27.7 (/x/libnccl.so.2)" in out


def test_check_build_says_cpu_build(tmp_path):
    out = report(tmp_path, build="cpu")
    assert "[ ] NCCL (CPU build)" in out
    assert "build:                  CPU only (no CUDA/NCCL)" in out


def test_nccl_built_follows_the_build_info():
    from tf_ring.runtime import basics
    info = basics.build_info()
    assert basics.nccl_built() == (info.get("build") == "cuda")
