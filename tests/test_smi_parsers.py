"""Readers of saved rocm-smi / amd-smi / rocminfo / nvidia-smi outputs, against the 21 real outputs in
shared/fixtures/rocm. Expected values below were read by hand from each fixture file."""

from __future__ import annotations

import pytest
from conftest import SMI_FIXTURES as FIXTURES
from conftest import needs_shared

from steadytune.hardware.archs import bf16_verdict, decode_rocm_smi_gfx
from steadytune.hardware.gpu_facts import lookup_product, override_for_arch
from steadytune.hardware.smi_parsers import merge_results, parse_text, split_samples

KB, MIB = 2**10, 2**20

# (index, name, arch, memory in bytes, native bf16, integrated); None where the output does not say.
def gpu(index, name=None, arch=None, memory=None, bf16=None, integrated=False):
    return (index, name, arch, memory, bf16, integrated)


NOTHING = dict(name=None, arch=None, memory=None, bf16=None)

# fixture -> (tool, [GPUs of output 1, GPUs of output 2, ...]) (files with several `# COMMAND` blocks hold several outputs)
EXPECTED = {
    "amd-smi_list_and_static-asic_mi308x.txt": ("amd-smi", [
        [gpu(0), gpu(1)],
        [gpu(0, "MI308X", "gfx942", None, True)]]),
    "amd-smi_metric_power_json.txt": ("amd-smi", [[gpu(0)], [gpu(0), gpu(1)]]),
    "amd-smi_static_mi300a.txt": ("amd-smi", [[gpu(i, "MI300A", "gfx942", 64289 * MIB, True) for i in range(4)]]),
    "amd-smi_static_mi350x_gfx950_partial.txt": ("amd-smi", [[gpu(0, "AMD Instinct MI350X", "gfx950", None, True)]]),
    "nvidia-smi_h100_x8.txt": ("nvidia-smi", [[gpu(i, "NVIDIA H100 80GB HBM3", "sm_90", 81559 * MIB, True) for i in range(8)]]),
    "nvidia-smi_query-gpu_csv.txt": ("nvidia-smi", [
        [gpu(0)],
        [gpu(0, "GeForce RTX 2080", "sm_75", 7979 * MIB, False)]]),
    "rocm-smi_-a_mi300x_x4.txt": ("rocm-smi", [[gpu(i, "AMD Instinct MI300X OAM", "gfx942", None, True) for i in range(4)]]),
    "rocm-smi_concise_mi250x_8gcd.txt": ("rocm-smi", [[gpu(i) for i in range(8)]]),
    "rocm-smi_concise_old_rocm3.3_vega10.txt": ("rocm-smi", [[gpu(1)]]),
    "rocm-smi_csv_rx6800_gfx1030_plus_igpu.txt": ("rocm-smi", [[
        gpu(0, "Navi 21 [Radeon RX 6800/6800 XT / 6900 XT]", "gfx1030", 17163091968, False),
        gpu(1, "Raphael", "gfx1036", 67108864, False, integrated=True)]]),
    "rocm-smi_json_rx7800xt_gfx1101.json.txt": ("rocm-smi", [[
        gpu(0, "Navi 32 [Radeon RX 7700 XT / 7800 XT]", "gfx1101", 17163091968, True)]]),
    "rocm-smi_mi300x_x4_concise.txt": ("rocm-smi", [[gpu(i, "AMD Instinct MI300X", "gfx942", None, True) for i in range(4)]]),
    "rocm-smi_productname_use_meminfo_rx7900xt_gfx1100.txt": ("rocm-smi", [
        [gpu(0, "Radeon RX 7900 XT", "gfx1100", 21458059264, True)],
        [gpu(0, "Radeon RX 7900 XT", "gfx1100", 21458059264, True)]]),
    "rocm-smi_showmeminfo_vram_plain.txt": ("rocm-smi", [[gpu(0, memory=4278190080)]]),
    "rocm-smi_showproductname_json_mi250x.json.txt": ("rocm-smi", [[
        gpu(0, "AMD INSTINCT MI200 (MCM) OAM LC MBA HPE C2", "gfx90a", None, True)]]),
    "rocm-smi_showproductname_mi100_and_fury.txt": ("rocm-smi", [
        [],                                                   # --showdriverversion: no GPU rows
        [gpu(i, "Arcturus GL-XL [AMD Instinct MI100]", "gfx908", None, True) for i in range(2)],
        [gpu(0, "Radeon R9 FURY X", "gfx803", None, False)]]),
    "rocminfo_mi250_gfx90a_partial.txt": ("rocminfo", [[gpu(i, "AMD Instinct MI250X/MI250", "gfx90a", 67092480 * KB, True) for i in range(2)]]),
    "rocminfo_mi300x_x4_gfx942.txt": ("rocminfo", [[gpu(i, "AMD Instinct MI300X", "gfx942", 201310208 * KB, True) for i in range(4)]]),
    "rocminfo_radeonvii_gfx906.txt": ("rocminfo", [[gpu(0, "AMD Radeon VII", "gfx906", 16760832 * KB, False)]]),
    "rocminfo_rx7800xt_gfx1101.txt": ("rocminfo", [[gpu(0, "AMD Radeon RX 7800 XT", "gfx1101", 16760832 * KB, True)]]),
    "rocminfo_rx7900xtx_gfx1100.txt": ("rocminfo", [[gpu(0, "Radeon RX 7900 XTX", "gfx1100", 25149440 * KB, True)]]),
}


@needs_shared
def test_every_fixture_is_in_the_table():
    assert sorted(p.name for p in FIXTURES.iterdir()) == sorted(EXPECTED)
    assert len(EXPECTED) == 21


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_gives_the_expected_gpus(name):
    tool, expected_outputs = EXPECTED[name]
    results = parse_text((FIXTURES / name).read_text(), name)
    assert len(results) == len(expected_outputs)
    for result, expected in zip(results, expected_outputs):
        assert result.problems == []
        assert result.tool == tool
        got = [(g.index, g.name, g.arch, g.memory_gib, g.bf16, g.integrated) for g in result.gpus]
        assert [g[:3] for g in got] == [e[:3] for e in expected]
        for g, e in zip(got, expected):
            if e[3] is None:
                assert g[3] is None
            else:
                assert g[3] == pytest.approx(e[3] / 2**30, abs=0.01)
            assert g[4] is e[4] and g[5] is e[5]


@pytest.mark.parametrize("raw, target", [("gfx9010", "gfx90a"), ("gfx11001", "gfx1101"), ("gfx1100", "gfx1100"),
                                         ("gfx1030", "gfx1030"), ("gfx942", "gfx942"), ("gfx90a", "gfx90a"),
                                         ("gfx1036", "gfx1036"), ("N/A", None), ("gfx99999", None)])
def test_rocm_smi_gfx_version_is_decoded(raw, target):
    assert decode_rocm_smi_gfx(raw) == target


@needs_shared
def test_rocm_smi_gfx_version_pitfall_is_explained():
    name = "rocm-smi_showproductname_json_mi250x.json.txt"
    [result] = parse_text((FIXTURES / name).read_text(), name)
    assert result.gpus[0].reported_gfx == "gfx9010"
    assert any("gfx9010" in n and "gfx90a" in n for n in result.notes)


@needs_shared
def test_outputs_of_one_machine_merge_gpu_by_gpu():
    names = ["rocm-smi_-a_mi300x_x4.txt", "rocminfo_mi300x_x4_gfx942.txt", "rocm-smi_mi300x_x4_concise.txt"]
    results = [r for n in names for r in parse_text((FIXTURES / n).read_text(), n)]
    gpus, conflicts = merge_results(results)
    assert conflicts == []
    assert [(g.index, g.arch, g.arch_source) for g in gpus] == [(i, "gfx942", "rocminfo Name") for i in range(4)]
    assert all(g.name == "AMD Instinct MI300X" and g.memory_gib == pytest.approx(201310208 / 2**20, abs=0.01) for g in gpus)
    assert gpus[0].bus_id == "0000:26:00.0"   # only rocm-smi -a shows it


@needs_shared
def test_outputs_of_two_machines_are_reported_as_a_conflict():
    names = ["rocminfo_rx7900xtx_gfx1100.txt", "rocminfo_rx7800xt_gfx1101.txt"]
    results = [r for n in names for r in parse_text((FIXTURES / n).read_text(), n)]
    gpus, conflicts = merge_results(results)
    assert len(gpus) == 1 and len(conflicts) == 1
    assert "gfx1100" in conflicts[0] and "gfx1101" in conflicts[0]


@needs_shared
def test_rocm_smi_arch_is_trusted_less_than_rocminfo():
    names = ["rocm-smi_json_rx7800xt_gfx1101.json.txt", "rocminfo_rx7800xt_gfx1101.txt"]
    results = [r for n in names for r in parse_text((FIXTURES / n).read_text(), n)]
    [merged], conflicts = merge_results(results)
    assert conflicts == [] and merged.arch == "gfx1101" and merged.arch_source == "rocminfo Name"
    assert merged.name == "AMD Radeon RX 7800 XT"


def test_split_samples_cuts_at_headers_and_prompts():
    text = "# SOURCE: x\n# COMMAND: rocminfo\nA\n\n$ rocm-smi --json\n{}\nuser@host:~$ nvidia-smi -L\nB\n"
    samples = split_samples(text)
    assert [(s.command, s.text.strip()) for s in samples] == [
        ("rocminfo", "A"), ("rocm-smi --json", "{}"), ("nvidia-smi -L", "B")]


def test_noheader_query_csv_without_command_guesses_name_and_says_so():
    [result] = parse_text("200.00, 7979, GeForce RTX 2080, GPU-22b2c6ac, 45\n", "q.csv")
    assert result.tool == "nvidia-smi" and [g.name for g in result.gpus] == ["GeForce RTX 2080"]
    assert any("columns guessed" in n for n in result.notes)
    [result] = parse_text("$ nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader,nounits\n"
                          "NVIDIA H200, 143771, 9.0\n", "q.csv")
    [g] = result.gpus
    assert (g.name, g.arch, g.arch_source) == ("NVIDIA H200", "sm_90", "nvidia-smi compute_cap")
    assert g.memory_gib == pytest.approx(143771 / 1024, abs=0.01)


@pytest.mark.parametrize("text", ["", "hello world\n", "{\"card0\": {", "GPU[0] : \n", "Agent 1\nName: gfx90a\n",
                                  "device,Card series\ncard0\n", "\x00\x01garbage", "[1, 2, 3]"])
def test_unreadable_input_is_a_problem_not_a_crash(text):
    results = parse_text(text, "x.txt")
    assert results
    for result in results:
        assert result.problems == [] or all(p.startswith("could not read x.txt") for p in result.problems)


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_truncated_fixtures_never_crash(name):
    text = (FIXTURES / name).read_text()
    for cut in range(0, len(text), max(1, len(text) // 25)):
        for result in parse_text(text[:cut], name):
            assert isinstance(result.gpus, list)


@pytest.mark.parametrize("product, arch, integrated", [
    ("AMD Instinct MI300X", "gfx942", False), ("AMD Instinct MI250X/MI250", "gfx90a", False),
    ("Radeon RX 7900 XTX", "gfx1100", False), ("Raphael", "gfx1036", True), ("NVIDIA H200", "sm_90", False),
    ("Tesla V100-SXM2-16GB", "sm_70", False), ("AMD Radeon VII", "gfx906", False)])
def test_product_table(product, arch, integrated):
    row = lookup_product(product)
    assert (row.arch, row.integrated) == (arch, integrated)


@pytest.mark.parametrize("arch, native", [("gfx906", False), ("gfx908", True), ("gfx90a", True), ("gfx942", True),
                                          ("gfx950", True), ("gfx1030", False), ("gfx1100", True), ("gfx1201", True),
                                          ("sm_75", False), ("sm_80", True), ("gfx90a:sramecc+:xnack-", True), (None, None)])
def test_bf16_verdict_by_architecture(arch, native):
    assert bf16_verdict(arch)[0] is native


def test_override_values():
    assert [override_for_arch(a) for a in ("gfx1031", "gfx1102", "gfx1151", "gfx1150", "gfx906")] == \
        ["10.3.0", "11.0.0", "11.0.0", None, None]
