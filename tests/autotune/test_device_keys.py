"""Device keys: what records say they were measured on, which records a compile picks (exact,
other thread count, family; never another architecture or ISA), and the migration of the
pre-device-key `host` records."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autotune.cli_tune import migrate_legacy_host
from autotune.database import Database
from autotune.device_keys import choose_key, cpu_key, device_key, family, gpu_key, isa_level
from autotune.records import Records
from tensorir.target import get_target, host_target

HOST = host_target()
LOCAL = cpu_key(HOST)


def _strip_avx512(t):
    feats = ",".join(f for f in t.features.split(",") if not f.startswith("+avx512"))
    return dataclasses.replace(t, features=feats)


def test_keys_name_arch_cpu_isa_threads_and_gpu_device():
    assert f"{HOST.arch}-{HOST.cpu.lower()}-{isa_level(HOST)}" == LOCAL
    assert device_key(HOST, threads=1) == LOCAL + "-t1"
    assert device_key(get_target("android-arm64")) == "aarch64-cortex-a76-neon"
    pocl = get_target("opencl:pocl")
    assert device_key(pocl, 0, "pthread-skylake-avx512-AMD EPYC 7B13") == (
        "opencl-pocl-pthread-skylake-avx512-amd-epyc-7b13"
    )
    assert device_key(pocl) == gpu_key("pocl") == "opencl-pocl"
    assert family("opencl-mali-g76-mali-g76-r0p0-t2") == "opencl-mali-g76"
    assert family("aarch64-cortex-a76-neon-t1") == "aarch64-neon"
    assert family("x86_64-znver4-avx512") == "x86_64-avx512"


Z, SKY, HAS = "x86_64-znver4-avx512", "x86_64-skylake-avx512", "x86_64-haswell-avx2"


@pytest.mark.parametrize(
    "available, want, expect",
    [
        ([Z, Z + "-t1"], Z + "-t1", (Z + "-t1", "exact")),
        ([Z + "-t1", Z + "-t2"], Z, (Z + "-t1", "other threads")),
        ([SKY, HAS], Z, (SKY, "family")),
        ([SKY], HAS, (None, "")),  # no AVX-512 code on an AVX2 machine
        ([Z, Z + "-t1"], "aarch64-cortex-a76-neon", (None, "")),  # never another architecture
        (["opencl-pocl-pthread-x"], "opencl-pocl", ("opencl-pocl-pthread-x", "family")),
        (["opencl-pocl-pthread-x"], "opencl-nvidia-nvidia-h100", (None, "")),
    ],
)
def test_choose_key(available, want, expect):
    assert choose_key(available, want) == expect


def _db_with(path, *devices):
    db = Database(path)
    for k, dev in enumerate(devices):
        db.add({"workload_key": "w", "device": dev, "config": {"i": k}, "costs": [1e-3 * (k + 1)]})
    return db


def test_records_of_this_cpu_are_not_applied_to_arm64_or_other_features(tmp_path):
    _db_with(tmp_path / "t.db", LOCAL, LOCAL + "-t1")
    mine = Records.for_target(HOST, db=tmp_path / "t.db", logs=False)
    assert (mine.device, mine.how, mine.best("w")) == (LOCAL, "exact", {"i": 0})
    for other in (get_target("android-arm64"), get_target("linux-arm64")):
        r = Records.for_target(other, db=tmp_path / "t.db", logs=False)
        assert (r.how, len(r), r.best("w")) == ("", 0, None)
    if isa_level(HOST) == "avx512":  # the same machine without AVX-512: another ISA, no records
        r = Records.for_target(_strip_avx512(HOST), db=tmp_path / "t.db", logs=False)
        assert (r.how, r.best("w")) == ("", None)


def test_legacy_host_records_are_this_machine_and_migrate(tmp_path, capsys):
    db = _db_with(tmp_path / "t.db", "host", "host-t1")
    r = Records.for_target(HOST, db=tmp_path / "t.db", logs=None)  # read-only: an alias
    assert (r.device, r.how, r.best("w")) == ("host", "exact", {"i": 0})
    migrate_legacy_host(db)
    assert db.devices() == sorted([LOCAL, LOCAL + "-t1"])
    assert "records of device 'host' are now" in capsys.readouterr().out
    assert Records.for_target(HOST.with_threads(None), db=tmp_path / "t.db", logs=None).best("w") == {"i": 0}
    assert Records.open(tmp_path / "t.db", None, device=LOCAL + "-t1").best("w") == {"i": 1}


def test_tir_compile_says_which_records_it_used(tmp_path, capsys, monkeypatch):
    from tensorir.cli import main

    monkeypatch.chdir(tmp_path)  # no ./tuning_logs
    _db_with(tmp_path / "t.db", LOCAL)
    model = str(Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx")
    assert main(["compile", model, "--records", "t.db", "-o", "out"]) == 0
    assert f"tuning records: device {LOCAL};" in capsys.readouterr().out
    assert main(["compile", model, "--records", "t.db", "--target", "android-arm64", "-o", "arm"]) == 0
    assert "tuning records: none fit device aarch64-cortex-a76-neon" in capsys.readouterr().out
