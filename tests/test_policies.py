"""LLM agents: exact log-probs against brute-force enumeration, sampling, wrappers, generate mode, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from adwm.envs import BuiltinEnv
from adwm.envs.base import OnDemandActions, logged_admissible
from adwm.policies import generation, kv_cache, scoring
from adwm.policies.base import AgentState, UniformPolicy
from adwm.policies.config import PolicyConfig
from adwm.policies.factory import build_policy
from adwm.policies.llm import LLMPolicy
from adwm.policies.loading import load_causal_lm
from adwm.policies.prompt import render_prompt
from adwm.policies.wrappers import EpsilonGreedy


def states(n: int = 3) -> list[AgentState]:
    env, out = BuiltinEnv(), []
    for seed in range(n):
        reset = env.reset(seed)
        step = env.step(env.gold_actions()[0])
        out.append(AgentState(reset.task, step.observation, [(reset.observation, "look")], step.admissible))
    return out


def reference_scores(model_dir: str, state: AgentState, cfg: PolicyConfig) -> np.ndarray:
    """Summed action log-likelihoods from one full forward pass per action (no cache, no batching)."""
    model, tok = load_causal_lm(model_dir)
    prompt = tok(render_prompt(cfg.prompt_template, state, cfg.history_turns))["input_ids"]
    out = []
    for a in state.admissible:
        act = tok(a + cfg.action_suffix, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([prompt + act])).logits[0].double(), -1)
        out.append(sum(logp[len(prompt) - 1 + k, t].item() for k, t in enumerate(act)))
    return np.array(out)


@pytest.mark.parametrize("temperature", [0.0, 0.3, 1.0, 2.5])
def test_log_prob_equals_enumerated_sampling_probability(tiny_lm_dir, temperature):
    cfg = PolicyConfig(name="p", model=tiny_lm_dir, temperature=temperature, history_turns=1)
    policy = LLMPolicy(cfg)
    for state in states():
        scores = reference_scores(tiny_lm_dir, state, cfg)
        if temperature == 0:
            best = scores == scores.max()
            expected = np.where(best, 1.0 / best.sum(), 0.0)
        else:
            z = np.exp((scores - scores.max()) / temperature)
            expected = z / z.sum()
        got = np.exp([policy.log_prob(state, a) for a in state.admissible])
        np.testing.assert_allclose(got, expected, atol=1e-5)
        assert got.sum() == pytest.approx(1.0, abs=1e-9)


def test_batched_scores_match_single_state_scores(tiny_lm_dir):
    policy = LLMPolicy(PolicyConfig(name="p", model=tiny_lm_dir, batch_states=2))
    batch = states(5)
    together = policy.action_scores(batch)
    for s, sc in zip(batch, together):
        np.testing.assert_allclose(policy.action_scores([s])[0], sc, atol=1e-5)


@pytest.mark.parametrize("pack_tokens", [8, 40, 4096])
def test_packed_scores_match_one_forward_pass_per_action(tiny_lm_dir, pack_tokens, monkeypatch):
    """Scores of every candidate from packed rows (a prompt and its candidates under a block mask; rows
    wider than PACK_TOKENS split, the prompt repeated) equal one full forward pass per candidate."""
    monkeypatch.setattr(scoring, "PACK_TOKENS", pack_tokens)
    cfg = PolicyConfig(name="p", model=tiny_lm_dir, history_turns=1)
    batch = states(4)
    got = LLMPolicy(cfg).action_scores(batch)
    for s, sc in zip(batch, got):
        np.testing.assert_allclose(sc, reference_scores(tiny_lm_dir, s, cfg), atol=1e-4)
    empty = AgentState(batch[0].task, batch[0].observation, [], [])
    assert [len(x) for x in LLMPolicy(cfg).action_scores([empty, batch[1]])] == [0, len(batch[1].admissible)]


def test_sampling_frequencies_match_log_probs(tiny_lm_dir):
    policy = LLMPolicy(PolicyConfig(name="p", model=tiny_lm_dir, temperature=1.0))
    state = states(1)[0]
    n = 3000
    rngs = [np.random.default_rng([11, i]) for i in range(n)]
    counts = {a: 0 for a in state.admissible}
    for a in policy.act([state] * n, rngs):
        counts[a] += 1
    p = np.exp([policy.log_prob(state, a) for a in state.admissible])
    freq = np.array([counts[a] for a in state.admissible]) / n
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / n) + 1e-3)


def test_epsilon_greedy_mixture_probabilities(tiny_lm_dir):
    greedy = LLMPolicy(PolicyConfig(name="g", model=tiny_lm_dir, temperature=0.0))
    state = states(1)[0]
    n_a = len(state.admissible)
    choice = greedy.act([state], [np.random.default_rng(0)])[0]
    for eps in (0.0, 0.25, 1.0):
        mix = EpsilonGreedy(greedy, eps)
        probs = np.exp([mix.log_prob(state, a) for a in state.admissible])
        assert probs.sum() == pytest.approx(1.0, abs=1e-12)
        assert probs[state.admissible.index(choice)] == pytest.approx(1 - eps + eps / n_a)
    mix = EpsilonGreedy(greedy, 0.5)
    n = 4000
    acts = mix.act([state] * n, [np.random.default_rng([5, i]) for i in range(n)])
    share = sum(a == choice for a in acts) / n
    assert share == pytest.approx(0.5 + 0.5 / n_a, abs=4 * np.sqrt(0.25 / n))


def test_uniform_and_factory(tiny_lm_dir):
    state = states(1)[0]
    assert UniformPolicy().log_prob(state, state.admissible[0]) == pytest.approx(-np.log(len(state.admissible)))
    assert UniformPolicy().log_prob(state, "not an action") == float("-inf")
    eps1 = build_policy(PolicyConfig(name="r", model="runs/never/made", eps=1.0))  # loads no model
    assert eps1.log_prob(state, state.admissible[0]) == pytest.approx(-np.log(len(state.admissible)))
    with pytest.raises(
        ValueError, match=r"kind: expected one of \['llm', 'uniform', 'heuristic'\], got 'oracle' \(policy 'agent'\)"
    ):
        build_policy(PolicyConfig(kind="oracle"))


def test_generate_mode_log_prob_is_the_decoding_probability(tiny_lm_dir):
    cfg = PolicyConfig(name="gen", model=tiny_lm_dir, mode="generate", temperature=0.8, max_new_tokens=6)
    policy = LLMPolicy(cfg)
    state = AgentState("Find the apple.", "You are in the kitchen.", [], None)
    action = policy.act([state], [np.random.default_rng(3)])[0]
    model, tok = load_causal_lm(tiny_lm_dir)
    prompt = tok(render_prompt(cfg.prompt_template, state, cfg.history_turns))["input_ids"]
    ids = tok(action + cfg.action_suffix, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0].double() / cfg.temperature
    logp = torch.log_softmax(logits, -1)
    expected = sum(logp[len(prompt) - 1 + k, t].item() for k, t in enumerate(ids))
    assert policy.log_prob(state, action) == pytest.approx(expected, abs=1e-6)


def test_batched_writing_log_probs_match_a_full_forward_pass_per_state(tiny_lm_dir):
    """Several states of different prompt lengths in one padded batch: each log p(text) equals a plain,
    uncached forward pass over prompt + text for that state alone."""
    cfg = PolicyConfig(name="gen", model=tiny_lm_dir, mode="generate", temperature=0.7, max_new_tokens=6)
    policy = LLMPolicy(cfg)
    states = [
        AgentState("Find the apple.", "You are in the kitchen.", [], None),
        AgentState("Put the key in the box.", "You are in the hall. A red box is here. The door is locked.", [], None),
        AgentState("Go west.", "Dark.", [], None),
    ]
    actions = ["take the apple", "open the red box", "go west now please"]
    model, tok = load_causal_lm(tiny_lm_dir)
    want = []
    for state, action in zip(states, actions):
        prompt = tok(render_prompt(cfg.prompt_template, state, cfg.history_turns))["input_ids"]
        ids = tok(action + cfg.action_suffix, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([prompt + ids])).logits[0].double() / cfg.temperature, -1)
        want.append(sum(logp[len(prompt) - 1 + k, t].item() for k, t in enumerate(ids)))
    np.testing.assert_allclose(policy.generation_log_probs(states, actions), want, atol=1e-5)
    np.testing.assert_allclose(policy.log_probs(states, actions), want, atol=1e-5)


def test_epsilon_greedy_over_a_writing_agent_reads_the_list_only_when_it_explores(tiny_lm_dir):
    """eps-mixture of a generate-mode agent: p(a) = (1-eps) p_gen(a) + eps 1[a in A] / |A|, and the
    (expensive) admissible list is fetched only by the random branch or by log_probs."""
    gen = LLMPolicy(PolicyConfig(name="gen", model=tiny_lm_dir, mode="generate", temperature=1.0, max_new_tokens=4))
    fetched = []
    listed = ["go north", "look", "take apple"]

    def fetch():
        fetched.append(1)
        return listed

    def state() -> AgentState:
        return AgentState("Find the apple.", "You are in the kitchen.", [], OnDemandActions(fetch))

    mix = EpsilonGreedy(gen, 0.5)
    rngs = [np.random.default_rng([2, i]) for i in range(12)]
    explore = [np.random.default_rng([2, i]).random() < 0.5 for i in range(12)]
    batch = [state() for _ in range(12)]
    mix.act(batch, rngs)
    assert sum(s.admissible.fetched for s in batch) == sum(explore) and 0 < sum(explore) < 12
    s = state()
    written = gen.act([s], [np.random.default_rng(0)])[0]
    assert not s.admissible.fetched
    p_gen = np.exp(gen.log_prob(s, written))
    in_list = written in listed
    assert np.exp(mix.log_prob(s, written)) == pytest.approx(0.5 * p_gen + 0.5 * in_list / 3, rel=1e-9)
    assert np.exp(mix.log_prob(s, "take apple")) == pytest.approx(
        0.5 * np.exp(gen.log_prob(s, "take apple")) + 0.5 / 3, rel=1e-9
    )
    assert mix.generates(s) and not EpsilonGreedy(UniformPolicy(), 0.5).generates(s)


def test_on_demand_actions_expire_and_log_as_null_when_unread():
    calls = []
    adm = OnDemandActions(lambda: calls.append(1) or ["b", "a"])
    assert logged_admissible(adm) is None and not calls  # never read: the log stores null
    assert adm.index("a") == 1 and list(adm) == ["b", "a"] and adm == ["b", "a"] and len(calls) == 1
    assert logged_admissible(adm) == ["b", "a"]
    late = OnDemandActions(lambda: ["c"])
    late.expire()
    with pytest.raises(RuntimeError, match="after its environment moved"):
        len(late)


def test_generate_mode_greedy_decoding(tiny_lm_dir):
    policy = LLMPolicy(PolicyConfig(name="gen", model=tiny_lm_dir, mode="generate", temperature=0.0, max_new_tokens=5))
    state = AgentState("Find the apple.", "You are in the kitchen.", [], None)
    a1 = policy.act([state], [np.random.default_rng(1)])[0]
    a2 = policy.act([state], [np.random.default_rng(2)])[0]
    assert a1 == a2  # greedy ignores the generator


def test_score_mode_without_admissible_actions_is_an_error(tiny_lm_dir):
    policy = LLMPolicy(PolicyConfig(name="p", model=tiny_lm_dir))
    with pytest.raises(ValueError, match="score mode needs admissible actions; use mode=generate"):
        policy.log_distributions([AgentState("t", "o", [], None)])


def test_missing_model_path_is_named():
    with pytest.raises(
        FileNotFoundError,
        match=r"collect.behaviour\[0\].policy.model: model path 'runs/none/agents/iter9' does not exist",
    ):
        build_policy(PolicyConfig(model="runs/none/agents/iter9"), "collect.behaviour[0].policy")


def test_bad_prompt_template_is_named(tiny_lm_dir):
    policy = LLMPolicy(PolicyConfig(name="p", model=tiny_lm_dir, prompt_template="{task} {goal}"))
    with pytest.raises(ValueError, match="policy.prompt_template: unknown field 'goal'"):
        policy.log_distributions(states(1))


def test_writing_through_a_prefix_tree_draws_what_the_agent_writes_and_reuses_its_logits(tiny_lm_dir):
    """The tree's walk draws with the row's generator from the logits the model gave for that prompt and
    prefix: the same texts as writing without it, for generators it has seen (no forward pass) and for new
    ones (the model runs from where the walk left the tree)."""
    from adwm.policies.prefix_tree import PrefixTree
    from adwm.runtime import costs

    policy = LLMPolicy(PolicyConfig(name="gen", model=tiny_lm_dir, mode="generate", temperature=1.5, max_new_tokens=5))
    states = [AgentState("Find the apple.", o, [], None) for o in ("You are in the kitchen.", "Dark.")]
    prompts = [policy.prompt_ids(s) for s in states for _ in range(6)]

    def rngs(seed: int) -> list[np.random.Generator]:
        return [np.random.default_rng([seed, i]) for i in range(len(prompts))]

    tree = PrefixTree(max_mb=16)
    for seed in (0, 0, 1, 2):
        with costs.recording() as record:
            written = policy.write(prompts, rngs(seed), tree)
        counts = record.to_dict()["counts"]
        assert written == policy.write(prompts, rngs(seed))
        assert len(tree) > 0 and counts["writer/states"] == len(prompts)
    # the repeated generators walked the tree to the end of every action
    with costs.recording() as record:
        policy.write(prompts, rngs(0), tree)
    counts = record.to_dict()["counts"]
    assert counts["writer/states_generated"] == 0 and counts.get("agent/forward_passes", 0) == 0
    # the tree's logits are the model's next-token logits after prompt + prefix
    model, _ = load_causal_lm(tiny_lm_dir)
    prompt = tuple(prompts[0])
    for prefix, logits in list(tree.nodes[prompt].items())[:4]:
        with torch.no_grad():
            want = model(torch.tensor([list(prompt) + list(prefix)])).logits[0, -1]
        torch.testing.assert_close(logits, want, atol=1e-4, rtol=1e-4)


def test_a_full_prefix_tree_serves_what_it_holds_and_stores_nothing_more(tiny_lm_dir):
    from adwm.policies.prefix_tree import PrefixTree

    policy = LLMPolicy(PolicyConfig(name="gen", model=tiny_lm_dir, mode="generate", temperature=1.0, max_new_tokens=4))
    prompts = [policy.prompt_ids(AgentState("Find the apple.", "Dark.", [], None))] * 8
    vocab = policy.model.config.vocab_size
    tree = PrefixTree(max_mb=3 * vocab * 4 / 2**20)  # room for three nodes
    rngs = [np.random.default_rng(i) for i in range(8)]
    assert policy.write(prompts, rngs, tree) == policy.write(prompts, [np.random.default_rng(i) for i in range(8)])
    assert len(tree) == 3 and tree.bytes == 3 * vocab * 4
    empty = PrefixTree(max_mb=0)  # a budget of 0 stores nothing: every row runs the model
    assert policy.write(prompts, [np.random.default_rng(i) for i in range(8)], empty) == policy.write(
        prompts, [np.random.default_rng(i) for i in range(8)]
    )
    assert len(empty) == 0 and empty.bytes == 0
    with pytest.raises(ValueError, match="max_mb must be >= 0"):
        PrefixTree(max_mb=-1)


def test_a_chunked_prefill_gives_each_row_its_own_logits_and_cache(tiny_lm_dir):
    """More prompts than a prefill chunk, of many lengths: each row's next-token logits, and those of the
    next step through the merged cache, equal a forward pass over that prompt alone."""
    model, tok = load_causal_lm(tiny_lm_dir)
    rng = np.random.default_rng(0)
    words = "you are in the kitchen a red box lies here the door is open go west take apple".split()
    texts = [" ".join(rng.choice(words, size=int(rng.integers(2, 40)))) for _ in range(2 * generation.PREFILL_ROWS + 5)]
    prompts = [tok(t)["input_ids"] for t in texts]
    with torch.no_grad():
        out, mask = generation.prompt_pass(model, prompts, tok.pad_token_id)
        name = kv_cache.cache_name(model)
        assert mask.size(1) == max(map(len, prompts)) and type(getattr(out, name)).__name__ == "DynamicCache"
        nxt = [int(rng.integers(10, 200)) for _ in prompts]
        step = model(
            input_ids=torch.tensor(nxt)[:, None],
            attention_mask=torch.cat([mask, torch.ones(len(prompts), 1, dtype=torch.long)], 1),
            position_ids=mask.sum(-1)[:, None],
            use_cache=True,
            **{name: getattr(out, name)},
        )
        for i, p in enumerate(prompts):
            alone = model(torch.tensor([p + [nxt[i]]])).logits[0]
            torch.testing.assert_close(out.logits[i, -1], alone[-2], atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(step.logits[i, -1], alone[-1], atol=1e-4, rtol=1e-4)


def test_a_prompt_that_several_rows_hold_is_prefilled_once_and_each_row_gets_its_cache(tiny_lm_dir):
    """k samples of one state repeat its prompt: each distinct prompt is prefilled once (rows counted at the
    model's input), and every row holding it gets the logits and, through the cache, the next step of that
    prompt alone."""
    model, tok = load_causal_lm(tiny_lm_dir)
    texts = ["you are in the kitchen", "dark", "a red box lies here and the door is open", "go west", "take it"]
    for order in ([i for i in range(5) for _ in range(4)], [2, 2, 2, 2]):  # above and within a prefill chunk
        prompts = [tok(texts[i])["input_ids"] for i in order]
        seen = []
        hook = model.register_forward_pre_hook(
            lambda _, args, kw, seen=seen: seen.append(kw["input_ids"].size(0)), with_kwargs=True
        )
        with torch.no_grad():
            out, mask = generation.prompt_pass(model, prompts, tok.pad_token_id, room=1)
        hook.remove()
        assert sum(seen) == len(set(order))
        name = kv_cache.cache_name(model)
        with torch.no_grad():
            step = model(
                input_ids=torch.full((len(prompts), 1), 42),
                attention_mask=torch.cat([mask, torch.ones(len(prompts), 1, dtype=torch.long)], 1),
                position_ids=mask.sum(-1)[:, None],
                use_cache=True,
                **{name: getattr(out, name)},
            )
            for row, p in enumerate(prompts):
                alone = model(torch.tensor([p + [42]])).logits[0]
                torch.testing.assert_close(out.logits[row, -1], alone[-2], atol=1e-4, rtol=1e-4)
                torch.testing.assert_close(step.logits[row, -1], alone[-1], atol=1e-4, rtol=1e-4)


def test_decoding_into_a_cache_with_room_gives_the_logits_of_transformers_growing_cache(tiny_lm_dir):
    """A prefill with room for two tokens writes them in place; its next-token logits equal, step by step,
    those of transformers' own cache (which copies itself to grow), also past the room (it then grows) and
    after rows leave the batch."""
    from transformers.cache_utils import DynamicLayer

    model, tok = load_causal_lm(tiny_lm_dir)
    texts = ["you are in the kitchen", "dark", "a red box lies here and the door is open"]
    prompts = [tok(t)["input_ids"] for t in texts]
    name = kv_cache.cache_name(model)
    with torch.no_grad():
        roomy, mask = generation.prompt_pass(model, prompts, tok.pad_token_id, room=2)
        plain, _ = generation.prompt_pass(model, prompts, tok.pad_token_id)
        assert {type(x) for x in getattr(roomy, name).layers} == {kv_cache.RoomyLayer}
        assert {type(x) for x in getattr(plain, name).layers} == {DynamicLayer}
        rows, pos = [0, 1, 2], mask.sum(-1)
        for step in range(4):
            if step == 3:  # the second row leaves both caches
                rows = [0, 2]
                assert kv_cache.keep_rows(getattr(roomy, name), [0, 2]) and kv_cache.keep_rows(
                    getattr(plain, name), [0, 2]
                )
                mask, pos = mask[[0, 2]], pos[[0, 2]]
            torch.testing.assert_close(roomy.logits[:, -1], plain.logits[:, -1], atol=0, rtol=0)
            nxt = torch.tensor([[11 + 7 * step + r] for r in rows])
            mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=torch.long)], 1)
            inputs = dict(input_ids=nxt, attention_mask=mask, position_ids=pos[:, None], use_cache=True)
            roomy = model(**inputs, **{name: getattr(roomy, name)})
            plain = model(**inputs, **{name: getattr(plain, name)})
            pos = pos + 1
        torch.testing.assert_close(roomy.logits[:, -1], plain.logits[:, -1], atol=0, rtol=0)
        layer = getattr(roomy, name).layers[0]
        assert layer.keys.size(-2) == mask.size(1) and layer.keys.size(0) == 2


@pytest.mark.parametrize("share", [0.0, generation.PRUNE_SHARE])
def test_a_row_that_stops_writing_leaves_the_batch_and_the_others_write_as_they_would_alone(
    tiny_lm_dir, share, monkeypatch
):
    """Rows stop at different lengths: each row's tokens equal those it draws with the same generator when
    its prompt is written alone; once the rows that stopped are `PRUNE_SHARE` of the batch they leave it
    (at a share of 0 every row leaves as it stops: a row of k tokens is decoded k - 1 times after the
    prefill)."""
    from adwm.runtime import costs

    monkeypatch.setattr(generation, "PRUNE_SHARE", share)

    model, tok = load_causal_lm(tiny_lm_dir)
    texts = ["you are in the kitchen", "dark", "a red box lies here and the door is open", "go west", "take apple"]
    prompts = [tok(t)["input_ids"] for t in texts]
    lengths = [1, 7, 3, 12, 5]

    def stop(row: int, ids: list[int]) -> bool:
        return len(ids) >= lengths[row]

    def rngs() -> list[np.random.Generator]:
        return [np.random.default_rng([7, i]) for i in range(len(prompts))]

    with costs.recording() as record:
        together = generation.sample_continuations(model, prompts, rngs(), tok.pad_token_id, stop, 1.3, 20)
    counts = record.to_dict()["counts"]
    assert [len(t) for t in together] == lengths
    if share == 0:
        assert counts["agent/rows_decoded"] == sum(k - 1 for k in lengths)  # 23
    else:  # at 0.5: all 5 rows decoded after tokens 1-4 (at most 2 stopped), 2 after tokens 5-6, 1 after 7-11
        assert share == 0.5 and counts["agent/rows_decoded"] == 4 * 5 + 2 * 2 + 5 * 1
    assert counts["agent/forward_passes"] == max(lengths)
    for i, prompt in enumerate(prompts):
        alone = generation.sample_continuations(
            model, [prompt], [rngs()[i]], tok.pad_token_id, lambda _, ids, i=i: stop(i, ids), 1.3, 20
        )
        assert alone == [together[i]]
