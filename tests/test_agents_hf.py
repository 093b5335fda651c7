"""The hf backend on a tiny random model: logprobs, padding, seeds, runner integration."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import spy_env  # noqa: E402
from agents import SamplingParams  # noqa: E402
from agents.decoding import DecodingOptions  # noqa: E402
from agents.hf import HFPolicy  # noqa: E402
from agents.prefix_cache import prefix_groups  # noqa: E402
from spy_env.runner import rollout  # noqa: E402


def observations(n_games=3):
    """Perform- and vote-stage observations of different lengths."""
    out = []
    for seed in range(n_games):
        env = spy_env.parallel_env(n_players=3)
        obs, _ = env.reset(seed=seed)
        out += [obs[a] for a in env.agents]
        obs, *_ = env.step({a: f"Problem {seed}{a}: $\\boxed{{{seed}}}$" * (seed + 1) for a in env.agents})
        out += [obs[a] for a in env.agents]
    return out


def teacher_forced(model, prompt, completion):
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits.float(), dim=-1)[0]
    return logp[len(prompt) - 1 : -1].gather(1, ids[0, len(prompt) :, None]).squeeze(1)


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(temperature=1.0, max_new_tokens=24, seed=0),
        SamplingParams(temperature=0.7, top_p=0.9, top_k=30, max_new_tokens=24, seed=1),
        SamplingParams(temperature=0.0, max_new_tokens=24),
    ],
    ids=["t1", "filtered", "greedy"],
)
def test_logprobs_equal_a_teacher_forced_forward_pass(tiny_model_dir, sampling):
    policy = HFPolicy.from_pretrained(
        str(tiny_model_dir), dtype="float32", device="cpu", sampling=sampling, batch_size=4
    )
    obs = observations()
    actions = policy.act(obs)
    assert len({len(a.prompt_token_ids) for a in actions}) > 3  # really different lengths, so padding
    groups = prefix_groups([a.prompt_token_ids for a in actions])
    assert len(groups) < len(actions) and max(shared for _, shared in groups) >= 100  # long prefixes, encoded once
    for action in actions:
        assert len(action.logprobs) == len(action.completion_token_ids) > 0
        ref = teacher_forced(policy.model, action.prompt_token_ids, action.completion_token_ids)
        assert torch.allclose(torch.tensor(action.logprobs), ref, atol=1e-4), (
            (ref - torch.tensor(action.logprobs)).abs().max()
        )
        assert action.finish_reason in ("stop", "length")
        assert action.prompt_token_ids == policy.encode(obs[actions.index(action)])


def test_shared_prefixes_change_nothing_but_the_work(tiny_model_dir):
    """Grouped prefixes (each encoded once) give the tokens and log-probs of a fresh prefill per row."""
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
    shared = HFPolicy.from_pretrained(str(tiny_model_dir), device="cpu", sampling=greedy, batch_size=16)
    fresh = HFPolicy(shared.model, shared.tokenizer, sampling=greedy, batch_size=16, share_prefix=False)
    obs = observations(3)
    a, b = shared.act(obs), fresh.act(obs)
    assert [x.completion_token_ids for x in a] == [x.completion_token_ids for x in b]
    for x, y in zip(a, b, strict=True):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)
    games = [prefix_groups([x.prompt_token_ids for x in a[k : k + 3]]) for k in range(0, len(a), 3)]
    assert [sorted(len(rows) for rows, _ in g) for g in games] == [[1, 2]] * len(games)  # the spy; the civilians


def test_the_cache_goes_by_the_name_the_installed_transformers_reads(tiny_model_dir):
    """transformers 5 renamed ``past_key_values`` to ``cache`` (the old name logs a deprecation)."""
    import inspect

    from agents.prefix_cache import cache_argument

    policy = HFPolicy.from_pretrained(str(tiny_model_dir), device="cpu")
    reads_cache = "cache" in inspect.signature(policy.model.forward).parameters
    assert cache_argument(policy.model, "C") == ({"cache": "C"} if reads_cache else {"past_key_values": "C"})

    class Old(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None):
            return input_ids

    assert cache_argument(Old(), "C") == {"past_key_values": "C"}


def test_prefix_groups_pick_the_long_shared_prefixes():
    system = list(range(100, 140))  # 40 tokens every prompt shares
    doc_a, doc_b = list(range(1000, 1300)), list(range(2000, 2300))
    a1, a2, b1, b2 = (system + doc + tail for doc, tail in ((doc_a, [1]), (doc_a, [2, 2]), (doc_b, [3]), (doc_b, [4])))
    spy = system + doc_a[:50] + [7] * 200 + [5]
    groups = prefix_groups([a1, b1, spy, a2, b2])
    assert groups == [([0, 3], 340), ([1, 4], 340), ([2], len(spy) - 1)]
    assert prefix_groups([a1, a2], keep=3) == [([0, 1], 338)]  # each keeps 3 tokens of its own
    assert prefix_groups([[1, 2], [3, 4]]) == [([0], 1), ([1], 1)]
    with pytest.raises(ValueError, match="keep=2"):
        prefix_groups([[1, 2]], keep=2)


def test_left_padding_does_not_change_greedy_outputs(tiny_model_dir):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    batched = HFPolicy.from_pretrained(str(tiny_model_dir), device="cpu", sampling=greedy, batch_size=8)
    obs = observations(2)
    together = batched.act(obs)
    alone = [batched.act([o])[0] for o in obs]
    assert [a.completion_token_ids for a in together] == [a.completion_token_ids for a in alone]


def test_seeded_sampling_is_reproducible_and_stops_at_length(tiny_model_dir):
    def run():
        policy = HFPolicy.from_pretrained(
            str(tiny_model_dir), device="cpu", sampling=SamplingParams(max_new_tokens=5, seed=7)
        )
        return [a.completion_token_ids for a in policy.act(observations(1))]

    first = run()
    assert first == run()
    assert all(len(ids) <= 5 for ids in first)


def test_performances_sample_apart_from_votes(tiny_model_dir):
    """``perform_sampling`` decodes every reply but a vote its own way; the votes draw exactly as a policy
    with ``sampling`` alone would, and a restart reseeds both."""
    from agents.decoding import is_vote

    sampled, greedy = SamplingParams(max_new_tokens=10, seed=3), SamplingParams(temperature=0.0, max_new_tokens=10)
    split = HFPolicy.from_pretrained(str(tiny_model_dir), device="cpu", sampling=sampled, batch_size=64)
    split.perform_sampling = greedy
    obs = observations(2)
    votes = [o for o in obs if is_vote(o)]
    performs = [o for o in obs if not is_vote(o)]
    assert votes and performs
    mixed = {id(o): a for o, a in zip(obs, split.act(obs), strict=True)}
    alone = HFPolicy.from_pretrained(str(tiny_model_dir), device="cpu", sampling=sampled, batch_size=64)
    assert [mixed[id(o)].completion_token_ids for o in votes] == [a.completion_token_ids for a in alone.act(votes)]
    as_greedy = HFPolicy.from_pretrained(str(tiny_model_dir), device="cpu", sampling=greedy, batch_size=64)
    assert [mixed[id(o)].completion_token_ids for o in performs] == [
        a.completion_token_ids for a in as_greedy.act(performs)
    ]
    other = HFPolicy.from_pretrained(str(tiny_model_dir), device="cpu", sampling=sampled, batch_size=64)
    other.act(votes)  # a second call draws other votes: the counter of calls moved on
    assert [a.completion_token_ids for a in other.act(votes)] != [mixed[id(o)].completion_token_ids for o in votes]
    split.restart_sampling(11)
    assert split.sampling.seed == split.perform_sampling.seed == 11
    assert split.perform_sampling.greedy and not split.sampling.greedy


def test_prompts_use_the_chat_template(tiny_model_dir):
    policy = HFPolicy.from_pretrained(str(tiny_model_dir), device="cpu")
    obs = observations(1)[0]
    text = policy.tokenizer.decode(policy.encode(obs))
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert obs["prompt"][-200:] in text


def test_runner_records_token_ids_and_logprobs(tiny_model_dir):
    policy = HFPolicy.from_pretrained(
        str(tiny_model_dir),
        device="cpu",
        sampling=SamplingParams(max_new_tokens=6, seed=0),
        name="tiny",
    )
    buffer = rollout(spy_env.GameConfig(n_players=3), [policy] * 3, 2, seed=0)
    assert len(buffer) == 12
    for row in buffer:
        assert row["agent_name"] == "tiny"
        assert row["prompt_token_ids"] and row["completion_token_ids"]
        assert len(row["logprobs"]) == len(row["completion_token_ids"])


def test_sampling_params_validation():
    for bad in (
        {"temperature": -1},
        {"top_p": 0},
        {"top_k": -2},
        {"max_new_tokens": 0},
        {"seed": "x"},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SamplingParams(**bad)


@pytest.mark.parametrize(
    ("vote_mode", "abstain"), [("constrained", False), ("think-then-vote", False), ("think-then-vote", True)]
)
def test_forced_votes_are_always_valid_and_score_only_the_models_choices(tiny_model_dir, vote_mode, abstain):
    from spy_env.parsing import parse_vote

    policy = HFPolicy.from_pretrained(
        str(tiny_model_dir),
        device="cpu",
        sampling=SamplingParams(max_new_tokens=24, seed=0),
        decoding=DecodingOptions(vote_mode, think_tokens=6, abstain=abstain),
    )
    obs = [o for o in observations(4) if o["stage"] == 1]
    actions = policy.act(obs)
    thinks = vote_mode == "think-then-vote"
    opener = (policy._ids("\n") if thinks else []) + policy._ids("<vote>")
    for o, action in zip(obs, actions, strict=True):
        vote = parse_vote(action.text, 3)
        assert vote.violation is None and action.finish_reason == "stop"
        if vote.target is None:  # an abstention, only when offered
            assert abstain and action.text.endswith("<vote>N/A</vote>")
        else:
            assert o["vote_targets"][vote.target] == 1 and vote.target != o["seat"]
        if not thinks:
            assert action.text == f"<vote>{vote.target + 1}</vote>"
        ids, mask = list(action.completion_token_ids), list(action.completion_mask)
        assert len(mask) == len(ids) == len(action.logprobs)
        # scored: every thinking token and the choice; forced: the tags, the newline and EOS
        choice_at = max(i for i, m in enumerate(mask) if m)
        choice = "N/A" if vote.target is None else str(vote.target + 1)
        assert ids[choice_at] == policy._ids(choice)[0]
        thinking = choice_at - len(opener)
        assert ids[thinking:choice_at] == opener or policy._ids("<vote>") == ids[choice_at - 3 : choice_at]
        assert thinking <= (6 if thinks else 0) and mask[:thinking] == [1] * thinking
        assert sum(mask) == thinking + 1
        probs = action.vote_distribution
        assert set(probs) == {str(s + 1) for s in range(3) if o["vote_targets"][s]} | ({"N/A"} if abstain else set())
        assert abs(sum(probs.values()) - 1) < 1e-5
        ref = teacher_forced(policy.model, action.prompt_token_ids, ids)
        assert torch.allclose(torch.tensor(action.logprobs), ref, atol=1e-4)  # raw log-probs, forced tokens too
        # the recorded distribution is the model's own at the choice step, renormalised over the choices
        with torch.no_grad():
            logits = policy.model(torch.tensor([list(action.prompt_token_ids) + ids[:choice_at]])).logits[0, -1]
        logits = torch.log_softmax(logits.float(), -1)
        firsts = {k: policy._ids(k)[0] for k in probs}
        z = torch.logsumexp(torch.stack([logits[t] for t in firsts.values()]), 0)
        for k, t in firsts.items():
            assert abs(probs[k] - float(torch.exp(logits[t] - z))) < 1e-4


def test_boxed_answers_end_every_performance(tiny_model_dir):
    from spy_env.parsing import last_boxed

    policy = HFPolicy.from_pretrained(
        str(tiny_model_dir),
        device="cpu",
        sampling=SamplingParams(max_new_tokens=30, seed=3),
        decoding=DecodingOptions(answer="boxed", answer_tokens=5),
    )
    obs = [o for o in observations(4) if o["stage"] == 0]
    free = HFPolicy(policy.model, policy.tokenizer, sampling=policy.sampling).act(obs)
    actions = policy.act(obs)
    assert sum(last_boxed(a.text) is None for a in free) > 0  # the tiny model does not box on its own
    opener = policy._ids("\n\n\\boxed{")
    for action in actions:
        assert last_boxed(action.text) is not None, action.text
        assert len(action.completion_token_ids) <= 30 and action.finish_reason == "stop"
        ids, mask = list(action.completion_token_ids), list(action.completion_mask)
        assert len(mask) == len(ids) == len(action.logprobs)
        starts = [i for i in range(len(ids)) if ids[i : i + len(opener)] == opener]
        if starts and mask[starts[-1]] == 0:  # forced: the opener is not scored, the body is
            start = starts[-1]
            assert mask[start : start + len(opener)] == [0] * len(opener) and all(mask[:start])
        assert mask[-1] == 0 or last_boxed(policy.tokenizer.decode(ids[:-1])) is not None  # EOS forced, or chosen
        ref = teacher_forced(policy.model, action.prompt_token_ids, ids)
        assert torch.allclose(torch.tensor(action.logprobs), ref, atol=1e-4)


def test_boxed_answer_is_detected_incrementally_as_by_decoding_the_whole_body(tiny_model_dir):
    """The body's ``\\boxed{…}`` status, kept up token by token, equals decoding the whole body
    and looking for a boxed answer after every token, on random texts dense in braces."""
    import random

    from transformers import AutoTokenizer

    from agents.decoding import AnswerProgram
    from spy_env.parsing import last_boxed

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))

    def decode(ids):
        return tokenizer.decode(ids, skip_special_tokens=True)

    pieces = ["\\boxed{", "\\boxed ", "{", "}", " ", "x", "42", "\\frac{1}{2}", "}}", " \\boxed{ }", "é"]
    pool = [tokenizer.encode(p, add_special_tokens=False) for p in pieces]
    pool += [[t] for t in random.Random(0).sample(range(len(tokenizer)), 30)]
    rng = random.Random(1)
    changes = 0
    for _ in range(400):
        program = AnswerProgram(10_000, [1], [2], eos=-1, decode=decode, has_answer=lambda s: last_boxed(s) is not None)
        previous = False
        for token in [t for _ in range(20) for t in rng.choice(pool)]:
            program.advance(token)
            assert program._complete == (last_boxed(decode(program.tokens)) is not None), program.tokens
            changes += program._complete != previous
            previous = program._complete
    assert changes > 30  # the texts did open, close and reopen boxes


def test_fast_dtype_is_bf16_only_where_the_cpu_computes_it():
    from agents.pretrained import native_bf16, resolve_dtype

    assert resolve_dtype("fast", "cpu") == (torch.bfloat16 if native_bf16() else torch.float32)
    assert resolve_dtype("fast", "cuda") == resolve_dtype("auto", "cuda") == torch.bfloat16
    assert resolve_dtype("auto", "cpu") == torch.float32  # the library keeps full precision on CPUs
    with pytest.raises(ValueError, match="auto, fast, float32"):
        resolve_dtype("fp8", "cpu")


def test_int8_quantizes_every_linear_layer_but_the_head_and_still_plays(tiny_model_dir):
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear

    from agents.pretrained import load_pretrained
    from agents.vllm_settings import engine_kwargs
    from spy_env.parsing import parse_vote

    full, _ = load_pretrained(str(tiny_model_dir), dtype="float32", device="cpu")
    small, _ = load_pretrained(str(tiny_model_dir), dtype="int8", device="cpu")
    linears = sum(isinstance(m, torch.nn.Linear) for m in full.modules())
    assert sum(isinstance(m, Int8Linear) for m in small.modules()) == linears - 1  # all but the output head
    head = small.get_output_embeddings()
    assert isinstance(head, torch.nn.Linear) and head.weight.dtype == torch.float32  # weights first on an AMD CPU
    ids = torch.randint(3, full.config.vocab_size, (2, 24))
    with torch.no_grad():
        exact, quantized = full(ids).logits, small(ids).logits
    assert not torch.equal(exact, quantized)  # the products did run in int8
    assert (exact - quantized).abs().max() < 0.05 * exact.abs().max()
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    policy = HFPolicy.from_pretrained(
        str(tiny_model_dir),
        dtype="int8",
        device="cpu",
        sampling=greedy,
        decoding=DecodingOptions(vote_mode="constrained"),
    )
    votes = [o for o in observations(2) if o["stage"] == 1]
    actions = policy.act(votes)
    targets = [parse_vote(a.text, 3).target for a in actions]
    assert all(t is not None and o["vote_targets"][t] == 1 for t, o in zip(targets, votes, strict=True))
    assert all(a.text == f"<vote>{t + 1}</vote>" for a, t in zip(actions, targets, strict=True))
    with pytest.raises(ValueError, match="int8 runs on a CPU only"):
        load_pretrained(str(tiny_model_dir), dtype="int8", device="cuda")
    with pytest.raises(ValueError, match="int8 is the hf backend's"):
        engine_kwargs(dtype="int8", cpu=True)


def test_a_reserved_cache_grows_and_decodes_as_a_full_forward(tiny_model_dir):
    """Decoding into a reserved cache (room for 2, then doubled) gives the logits of a fresh full forward."""
    from transformers import AutoModelForCausalLM

    from agents.prefix_cache import cache_argument, output_cache, reserve

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32).eval()
    ids = torch.randint(5, 200, (2, 30))
    with torch.inference_mode():
        cache = output_cache(model(input_ids=ids[:, :25], use_cache=True))
        for layer in cache.layers:
            reserve(layer, 27)  # room for two tokens: the later ones grow the buffer
        steps = [
            model(input_ids=ids[:, k : k + 1], **cache_argument(model, cache)).logits[:, -1] for k in range(25, 30)
        ]
        full = model(input_ids=ids).logits[:, 25:]
    assert cache.get_seq_length() == 30
    assert torch.allclose(torch.stack(steps, dim=1), full, atol=1e-4)
