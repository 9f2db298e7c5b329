# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which names and arguments are secrets, and how they are masked."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import (
    MASK, argv_secrets, env_summary, hide_only_secrets, is_secret_name, mask_cmdlines, masked_argv, masked_text,
    secret_argv_values, secret_env_names,
)


@pytest.mark.parametrize("name", ["HF_TOKEN", "VLLM_API_KEY", "AWS_SECRET_ACCESS_KEY", "hf_token", "DB_PASSWORD",
                                  "LDAP_PASSWD", "GOOGLE_APPLICATION_CREDENTIALS", "OPENAI_APIKEY", "TOKEN", "api-key",
                                  "SECRETS_DIR", "HUGGING_FACE_HUB_TOKEN", "MY.KEY"])
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["NCCL_PROTO", "CUDA_VISIBLE_DEVICES", "TOKENIZERS_PARALLELISM", "VLLM_USE_V1",
                                  "MAX_NUM_BATCHED_TOKENS", "KEYBOARD", "MONKEY", "SSL_KEYFILE", "PATH", ""])
def test_plain_names(name):
    assert not is_secret_name(name)


def test_extra_names_are_secret_exactly():
    assert is_secret_name("GITHUB_PAT", ["GITHUB_PAT"]) and not is_secret_name("github_pat", ["GITHUB_PAT"])
    assert secret_env_names({"GITHUB_PAT": "x", "HF_TOKEN": "y", "NCCL_PROTO": "LL"}, ["GITHUB_PAT"]) == ["GITHUB_PAT", "HF_TOKEN"]


@pytest.mark.parametrize("argv, masked", [
    (["vllm", "serve", "m", "--api-key", "sk-1", "--port", "8000"], ["vllm", "serve", "m", "--api-key", MASK, "--port", "8000"]),
    (["vllm", "serve", "m", "--api-key=sk-1"], ["vllm", "serve", "m", "--api-key=" + MASK]),
    (["vllm", "serve", "m", "--api-key", "a", "b", "--port", "1"], ["vllm", "serve", "m", "--api-key", MASK, MASK, "--port", "1"]),
    (["vllm", "serve", "m", "--hf-token", "-dash-start"], ["vllm", "serve", "m", "--hf-token", MASK]),
    (["vllm", "serve", "m", "--api-key", "--port", "1"], ["vllm", "serve", "m", "--api-key", "--port", "1"]),
    (["vllm", "serve", "m", "--api-key="], ["vllm", "serve", "m", "--api-key="]),
    (["vllm", "serve", "m", "--max-num-batched-tokens", "8192", "--tokenizer", "t"],
     ["vllm", "serve", "m", "--max-num-batched-tokens", "8192", "--tokenizer", "t"]),
    (["vllm", "serve", "m", "--ssl-keyfile", "/etc/k.pem"], ["vllm", "serve", "m", "--ssl-keyfile", "/etc/k.pem"]),
    (["x", "--db_password", "pw", "--port", 8000], ["x", "--db_password", MASK, "--port", "8000"]),
])
def test_masked_argv(argv, masked):
    assert masked_argv(argv) == masked
    assert len(secret_argv_values(argv)) == sum(word.count(MASK) for word in masked)


def test_argv_secret_positions():
    argv = ["vllm", "serve", "m", "--api-key", "k1", "--hf-token=t1"]
    assert [(s.index, s.start, s.option) for s in argv_secrets(argv)] == [(4, 0, "api-key"), (5, 11, "hf-token")]
    assert secret_argv_values(argv) == ["k1", "t1"]


def test_env_summary_masks_secret_values_only():
    assert env_summary({"HF_TOKEN": "hf_x", "NCCL_PROTO": "LL", "N": None}) == {"HF_TOKEN": MASK, "NCCL_PROTO": "LL", "N": ""}


class FakeModule:
    def __init__(self, values):
        self.no_log_values = set(values)


def test_hide_only_secrets_keeps_the_secrets_and_frees_the_rest():
    module = FakeModule({"LL", "1", "--api-key=sk", "hf_x", "other-option-secret"})
    hide_only_secrets(module, ["LL", "1", "--api-key=sk"], ["hf_x", "sk", None, ""])
    assert module.no_log_values == {"hf_x", "sk", "other-option-secret"}


def test_a_value_both_shown_and_secret_stays_hidden():
    module = FakeModule({"same"})
    hide_only_secrets(module, ["same"], ["same"])
    assert module.no_log_values == {"same"}


def test_mask_cmdlines_masks_every_cmdline_of_a_result_and_nothing_else():
    result = {
        "killed": [{"pid": 7, "cmdline": ["vllm", "serve", "m", "--api-key", "sk-1"], "name": "--api-key"}],
        "gpus": [{"processes_left": [{"cmdline": ["python3", "--hf-token=hf_2"]}], "cmdline": None}],
        "msg": "kept as it is",
    }
    masked = mask_cmdlines(result)
    assert masked["killed"][0]["cmdline"] == ["vllm", "serve", "m", "--api-key", MASK]
    assert masked["gpus"][0]["processes_left"][0]["cmdline"] == ["python3", "--hf-token=" + MASK]
    assert masked["killed"][0]["name"] == "--api-key" and masked["msg"] == "kept as it is" and masked["gpus"][0]["cmdline"] is None
    assert result["killed"][0]["cmdline"][-1] == "sk-1"  # the input is not changed


def test_a_process_title_is_masked_inside_wherever_it_is_returned():
    title = "python3 serve.py --api-key sk-9 --port 8000"
    assert masked_argv([title]) == ["python3 serve.py --api-key %s --port 8000" % MASK]
    assert masked_text(title) == "python3 serve.py --api-key %s --port 8000" % MASK
    assert masked_text(["vllm", "serve", "--api-key=sk-9"]) == "vllm serve --api-key=" + MASK
    assert masked_text(None) is None and masked_text("VLLM::Worker_TP0") == "VLLM::Worker_TP0"
    facts = {"processes": [{"name": title, "cmdline": [title]}]}
    assert "sk-9" not in repr(mask_cmdlines(facts))
