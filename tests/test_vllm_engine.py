"""vLLM rollouts (trainers/vllm_engine.py) on a machine without vLLM.

vLLM itself needs CUDA, so these tests check everything around it: the arguments against TRL
1.16's real ``VLLMGeneration`` class, the conversion of its outputs into actions, the vote regex,
the install hint, and — with an engine that honours ``VLLMGeneration``'s interface but generates
with transformers from *its own copy* of the weights, as vLLM does — that the trainer pushes the
weights after every update and after a resume, so rollouts never come from stale weights.
"""

from __future__ import annotations

import copy
import inspect
import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from agents.decoding import DecodingOptions, vote_regex  # noqa: E402
from agents.hf import HFPolicy  # noqa: E402
from agents.sampling import SamplingParams  # noqa: E402
from spy_env.buffer import EpisodeBuffer  # noqa: E402
from trainers import SpyRLConfig  # noqa: E402
from trainers.vllm_engine import (  # noqa: E402
    VLLMRolloutPolicy,
    actions_from_generation,
    vllm_generation_kwargs,
)


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


def test_arguments_bind_to_trl_vllm_generation_and_vllm_is_required(tmp_path, tiny):
    """Our kwargs are accepted by TRL 1.16's real class, which sets the attributes we drive
    (``structured_outputs_regex``, ``max_completion_length``) before it asks for vLLM."""
    from accelerate import Accelerator
    from trl.generation.vllm_generation import VLLMGeneration

    _, model, tokenizer = tiny
    for generation in ("vllm-colocate", "vllm-server"):
        config = _config(tmp_path, generation=generation, vllm_gpu_memory_utilization=0.25, vllm_max_model_length=9000)
        kwargs = vllm_generation_kwargs(config.rollout, config.decoding, model, Accelerator(cpu=True), tokenizer)
        inspect.signature(VLLMGeneration).bind(**kwargs)
        engine = VLLMGeneration.__new__(VLLMGeneration)
        with pytest.raises(ImportError, match="vLLM"):
            engine.__init__(**kwargs)
        assert engine.mode == {"vllm-colocate": "colocate", "vllm-server": "server"}[generation]
        assert engine.structured_outputs_regex is None and engine.logprobs == 0
        assert engine.max_completion_length == config.decoding.max_completion_tokens == 16
        assert engine.gpu_memory_utilization == 0.25 and engine.temperature == config.decoding.temperature
        assert engine.max_model_length == 9000
        assert (engine.server_base_url == config.rollout.vllm_server_url) == (generation == "vllm-server")
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
    with pytest.raises(ValueError, match=field):
        _config(tmp_path, **{field: value})


def test_completions_for_other_prompts_are_refused(tiny):
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


# --------------------------------------------- the trainer drives the engine right
class SeparateWeightsEngine:
    """``VLLMGeneration``'s interface over transformers, holding its own copy of the weights (as
    vLLM does): the copy only changes when ``sync_weights`` pushes the trained model's."""

    def __init__(self, config, model, accelerator, tokenizer, model_path):
        self.model = model  # the trained model, as TRL's class holds it
        self.copy = copy.deepcopy(model).eval()
        self.max_completion_length = config.decoding.max_completion_tokens
        self.max_model_length = None  # as VLLMGeneration holds it: None leaves the limit to vLLM
        self.structured_outputs_regex = None
        self.generator = HFPolicy(
            self.copy,
            tokenizer,
            sampling=SamplingParams(
                temperature=config.decoding.temperature, max_new_tokens=config.decoding.max_completion_tokens
            ),
        )
        self.calls: list[tuple[int, str | None]] = []
        self.stale_before_sync: list[float] = []

    def generate(self, prompts, images, num_generations):
        assert images is None and num_generations == 1
        self.calls.append((len(prompts), self.structured_outputs_regex))
        actions = self.generator.generate(prompts)
        return (
            [a.prompt_token_ids for a in actions],
            [a.completion_token_ids for a in actions],
            [[[lp] for lp in a.logprobs] for a in actions],
            [[[t] for t in a.completion_token_ids] for a in actions],
        )

    def distance(self) -> float:
        trained = dict(self.model.named_parameters())
        return max((trained[n].detach() - p).abs().max().item() for n, p in self.copy.named_parameters())

    def sync_weights(self):
        self.stale_before_sync.append(self.distance())
        with torch.no_grad():
            trained = dict(self.model.named_parameters())
            for name, param in self.copy.named_parameters():
                param.copy_(trained[name])


def test_prompts_longer_than_the_engine_context_forfeit_alone(tmp_path, tiny):
    _, model, tokenizer = tiny
    engine = SeparateWeightsEngine(_config(tmp_path), model, None, tokenizer, None)
    encoder = HFPolicy(model, tokenizer)
    short, long = {"stage": 0, "prompt": "a b"}, {"stage": 0, "prompt": "word " * 200}
    engine.max_model_length = len(encoder.encode(long))  # no room left for a single new token
    policy = VLLMRolloutPolicy(engine, encoder)
    actions = policy.act([short, long, short])
    assert engine.calls == [(3, None)]  # the batch keeps its size (server mode slices by it)
    assert actions[1].error and "no room" in actions[1].error and actions[1].text == ""
    assert all(a.error is None and a.completion_token_ids for a in (actions[0], actions[2]))
    assert policy.stats == {"calls": 1, "too_long": 1}


@pytest.mark.slow
def test_trainer_syncs_the_engine_after_each_update_and_after_resume(tmp_path, monkeypatch):
    import trainers.vllm_engine as vllm_engine
    from trainers.grpo import SpyRLTrainer

    engines: list[SeparateWeightsEngine] = []

    def make(rollout, decoding, model, accelerator, tokenizer, model_path):
        engines.append(SeparateWeightsEngine(config, model, accelerator, tokenizer, model_path))
        return engines[-1]

    monkeypatch.setattr(vllm_engine, "make_vllm_generation", make)
    config = _config(tmp_path, generation="vllm-colocate", learning_rate=1e-2, keep_buffers=True)
    trainer = SpyRLTrainer(config)
    assert isinstance(trainer.policy, VLLMRolloutPolicy)
    engine = engines[0]
    for _ in range(2):
        trainer.train_iteration()
        assert engine.distance() == 0.0  # rollouts of the next iteration use the updated weights
    buffer = EpisodeBuffer.load(tmp_path / "run" / "buffers" / "iter_00001.parquet")
    assert len(buffer) == 2 * 2 * 3 * 2  # games × players × stages
    assert all(r["completion_token_ids"] and len(r["logprobs"]) == len(r["completion_token_ids"]) for r in buffer)
    assert len(engine.stale_before_sync) == 2 and all(d > 0 for d in engine.stale_before_sync)  # updates happened
    regexes = {regex for _, regex in engine.calls}
    assert None in regexes  # performances are free
    assert any(r and re.fullmatch(r"<vote>\(\?:[\d|]+\)</vote>", r) for r in regexes)  # votes constrained

    resumed = SpyRLTrainer.from_checkpoint(config)
    assert resumed.iteration == 2 and len(engines) == 2
    assert len(engines[1].stale_before_sync) == 1, "a resumed trainer must push the checkpoint's weights"
    assert engines[1].stale_before_sync[0] > 0  # the engine started from the initial weights ...
    assert engines[1].distance() == 0.0  # ... and was given the checkpoint's


def test_vllm_rollouts_refuse_a_boxed_answer_by_name(tiny):
    """vLLM training sends one pattern per call and cannot force a boxed ending: refused, not dropped."""
    _, model, tokenizer = tiny
    with pytest.raises(ValueError, match=r"DecodingOptions\.answer='boxed' is not supported by vLLM rollouts"):
        VLLMRolloutPolicy(object(), HFPolicy(model, tokenizer), decoding=DecodingOptions(answer="boxed"))
    with pytest.raises(
        ValueError, match=r"SpyRLConfig\.decoding\.answer must be 'free' with rollout\.generation='vllm-colocate'"
    ):
        SpyRLConfig.from_dict(dict(answer="boxed", generation="vllm-colocate"))
    policy = VLLMRolloutPolicy(object(), HFPolicy(model, tokenizer), decoding=DecodingOptions("think-then-vote", 8))
    assert policy.regex([{"stage": 1, "vote_targets": [1, 1]}]) == "[^<]{0,32}<vote>(?:1|2)</vote>"
