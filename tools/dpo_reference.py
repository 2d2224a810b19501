#!/usr/bin/python3
"""Independent float64 PyTorch reference for preference tuning (DPO and its variants), written
from TRL's definitions (trl/trainer/dpo_trainer.py: dpo_loss, the concatenated forward and
get_batch_loss_metrics; trl/trainer/cpo_trainer.py for SimPO), over the decoder of
tools/decoder_reference.py (Qwen2, Qwen3, Llama; LoRA as PEFT applies it).

Run the self-check (independent scalar loops, finite differences, policy = reference):

    /usr/bin/python3 tools/dpo_reference.py --check

Write golden fixtures (one directory per case, read by kiln's DPO tests: tests/train/
preference_reference_test.cc; each full fine-tuning case also with policy = reference, sigmoid):

    /usr/bin/python3 tools/dpo_reference.py --out tests/fixtures/dpo

Needs only PyTorch and numpy (Debian's python3-torch / python3-numpy, installed by hand);
nothing in the build or CI runs it.

Definitions (a pair: prompt p, chosen completion c, rejected completion r, token ids as given,
TRL's pre-tokenized form: nothing added):
  a sequence is p + completion; its log-probability logp is the SUM over the completion's tokens
  of log softmax(logits[t - 1])[ids[t]] (the prompt's tokens take no part); n is the
  completion's length. Chosen and rejected go through a model in one batch (TRL's
  concatenated forward: the chosen rows, then the rejected rows, right-padded).
  pc, pr: the policy's logp of c and r; rc, rr: the reference's (no gradient); beta > 0.
  sigmoid: z = (pc - pr) - (rc - rr);
           loss_i = -(1 - ls) log sigmoid(beta z) - ls log sigmoid(-beta z)   (ls: label_smoothing)
  ipo:     z = (pc/nc - pr/nr) - (rc/nc - rr/nr)  (current TRL: each log-ratio divided by its
           completion's length inside the loss only); loss_i = (z - 1 / (2 beta))^2
  hinge:   z as sigmoid's; loss_i = max(0, 1 - beta z)
  simpo:   reference-free (CPO's loss_type simpo): z = pc/nc - pr/nr - gamma / beta;
           loss_i = -(1 - ls) log sigmoid(beta z) - ls log sigmoid(-beta z)
  loss = mean over the pairs of loss_i.
Metrics (TRL's names; means over the pairs; sums, never length-normalised, for every type):
  rewards/chosen = beta (pc - rc), rewards/rejected = beta (pr - rr),
  rewards/accuracies = [rewards/chosen > rewards/rejected], rewards/margins = their difference,
  logps/chosen = pc, logps/rejected = pr.  (simpo: rewards are beta pc/nc and beta pr/nr, CPO's.)
With a lora section the reference is the base with the adapters off; otherwise a model of the
same shape (reference: base in a recipe is the policy's own starting weights).
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoder_reference as ref  # noqa: E402  (the decoder, its cases and safetensors I/O)

LOSS_TYPES = ("sigmoid", "ipo", "hinge", "simpo")
METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
           "logps/chosen", "logps/rejected")
PAD_ID = 0

# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------

# Pairs as token ids: (prompt, chosen, rejected). Completions of different lengths (IPO's
# normalisation matters), a one-token completion, a prompt of one token, chosen and rejected
# sharing a prefix.
def make_pairs(vocab, seed):
    g = torch.Generator().manual_seed(seed)

    def ids(n):
        return torch.randint(1, vocab, (n,), generator=g).tolist()

    shared = ids(2)
    return [
        (ids(4), ids(3), ids(5)),
        (ids(1), ids(6), ids(1)),
        (ids(3), shared + ids(2), shared + ids(3)),
    ]


CASES = {
    # Full fine-tuning: the policy is the base case's weights, the reference another draw of the
    # same shape (so that the rewards are not zero).
    "dpo_qwen2_tied_gqa": dict(base="tied_gqa", reference_seed=4321, pair_seed=11,
                               beta=0.1, label_smoothing=0.0),
    "dpo_qwen3_untied_hd6": dict(base="qwen3_untied_hd6", reference_seed=8765, pair_seed=12,
                                 beta=0.5, label_smoothing=0.2, simpo_gamma=0.5),
    # LoRA: the reference is the base with the adapters off.
    "dpo_lora_llama_tied_llama3": dict(lora="lora_llama_tied_llama3", pair_seed=13, beta=0.1,
                                       label_smoothing=0.0),
}

# --------------------------------------------------------------------------
# Sequence log-probabilities
# --------------------------------------------------------------------------


def concatenated_batch(pairs):
    """TRL's concatenated forward: the chosen sequences, then the rejected, right-padded with
    PAD_ID; labels -100 on the prompt and the padding. Returns ids, labels (2B, T) and the
    completions' lengths (2B,)."""
    seqs = [(p, c) for p, c, _ in pairs] + [(p, r) for p, _, r in pairs]
    T = max(len(p) + len(c) for p, c in seqs)
    ids, labels, lengths = [], [], []
    for p, c in seqs:
        pad = T - len(p) - len(c)
        ids.append(p + c + [PAD_ID] * pad)
        labels.append([ref.IGNORE_INDEX] * len(p) + c + [ref.IGNORE_INDEX] * pad)
        lengths.append(len(c))
    return ids, labels, lengths


def completion_logps(logits, labels):
    """(2B,) sums over each row's completion tokens of log p(token | what precedes it)."""
    labels = torch.as_tensor(labels, dtype=torch.long)[:, 1:]
    logp = torch.log_softmax(logits[:, :-1, :], dim=-1)
    mask = labels != ref.IGNORE_INDEX
    picked = torch.gather(logp, 2, labels.clamp(min=0).unsqueeze(2)).squeeze(2)
    return (picked * mask).sum(dim=1)


def sequence_logps(cfg, P, pairs, lora=None):
    """(chosen logps (B,), rejected logps (B,), chosen lengths, rejected lengths)."""
    ids, labels, lengths = concatenated_batch(pairs)
    logps = completion_logps(ref.forward(cfg, P, ids, lora), labels)
    B = len(pairs)
    n = torch.tensor(lengths, dtype=torch.float64)
    return logps[:B], logps[B:], n[:B], n[B:]


# --------------------------------------------------------------------------
# The losses and metrics
# --------------------------------------------------------------------------


def smoothed_sigmoid(z, beta, ls):
    f = torch.nn.functional.logsigmoid
    return -(1 - ls) * f(beta * z) - ls * f(-beta * z)


def preference_loss(s, pc, pr, rc, rr, nc, nr):
    """Mean loss over the pairs and the metrics (dict of floats). s: the case's settings
    (loss_type, beta, label_smoothing, simpo_gamma)."""
    beta, ls, kind = s["beta"], s.get("label_smoothing", 0.0), s["loss_type"]
    if kind == "sigmoid":
        losses = smoothed_sigmoid((pc - pr) - (rc - rr), beta, ls)
    elif kind == "ipo":
        z = (pc / nc - pr / nr) - (rc / nc - rr / nr)
        losses = (z - 1 / (2 * beta)) ** 2
    elif kind == "hinge":
        losses = torch.relu(1 - beta * ((pc - pr) - (rc - rr)))
    elif kind == "simpo":
        gamma = s.get("simpo_gamma", 0.5)
        losses = smoothed_sigmoid(pc / nc - pr / nr - gamma / beta, beta, ls)
    else:
        raise ValueError(kind)
    if kind == "simpo":
        chosen, rejected = beta * (pc / nc).detach(), beta * (pr / nr).detach()
    else:
        chosen, rejected = beta * (pc - rc).detach(), beta * (pr - rr).detach()
    metrics = {
        "rewards/chosen": chosen.mean().item(),
        "rewards/rejected": rejected.mean().item(),
        "rewards/accuracies": (chosen > rejected).double().mean().item(),
        "rewards/margins": (chosen - rejected).mean().item(),
        "logps/chosen": pc.detach().mean().item(),
        "logps/rejected": pr.detach().mean().item(),
    }
    return losses.mean(), metrics


def loss_and_grads(cfg, policy32, reference32, pairs, s, lora=None, trainable=None):
    """The step's loss, metrics and the gradient of every trainable tensor (float64).
    policy32: the policy's float32 tensors (base plus adapters under lora); reference32: the
    reference's (unused by simpo); trainable: names that get a gradient (default: all)."""
    P = {n: t.to(torch.float64).clone().requires_grad_(trainable is None or n in trainable)
         for n, t in policy32.items()}
    pc, pr, nc, nr = sequence_logps(cfg, P, pairs, lora)
    with torch.no_grad():
        R = {n: t.to(torch.float64) for n, t in reference32.items()}
        rc, rr, _, _ = sequence_logps(cfg, R, pairs)
    loss, metrics = preference_loss(s, pc, pr, rc, rr, nc, nr)
    loss.backward()
    grads = {n: P[n].grad.detach().clone() for n in P if P[n].requires_grad}
    return loss.item(), metrics, grads


# --------------------------------------------------------------------------
# A case's models
# --------------------------------------------------------------------------


def case_models(case):
    """(cfg, policy float32 tensors, reference float32 tensors, lora or None, trainable names
    or None, pairs)."""
    if "lora" in case:
        lora = ref.LORA_CASES[case["lora"]]
        base = ref.CASES[lora["base"]]
        cfg = ref.hf_config(base)
        params = ref.make_params(cfg, base["seed"])
        adapter = ref.make_adapter(cfg, lora)
        policy, reference, trainable = {**params, **adapter}, params, set(adapter)
    else:
        lora, base = None, ref.CASES[case["base"]]
        cfg = ref.hf_config(base)
        policy = ref.make_params(cfg, base["seed"])
        reference = ref.make_params(cfg, case["reference_seed"])
        trainable = None
    return cfg, policy, reference, lora, trainable, make_pairs(cfg["vocab_size"],
                                                                case["pair_seed"])


def settings(case, loss_type):
    return {"loss_type": loss_type, "beta": case["beta"],
            "label_smoothing": case.get("label_smoothing", 0.0),
            "simpo_gamma": case.get("simpo_gamma", 0.5)}


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------


def write_pairs(path, pairs):
    with open(path, "w") as f:
        for p, c, r in pairs:
            f.write(json.dumps({"prompt_input_ids": p, "chosen_input_ids": c,
                                "rejected_input_ids": r}) + "\n")


def generate(out_dir):
    for name, case in CASES.items():
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        cfg, policy, reference, lora, trainable, pairs = case_models(case)
        base = ref.CASES[ref.LORA_CASES[case["lora"]]["base"] if lora else case["base"]]
        written = ref.hf_config(base)
        del written["family"]
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(written, f, indent=2)
            f.write("\n")
        base_names = [n for n in policy if trainable is None or n not in trainable]
        ref.write_safetensors(os.path.join(d, "model.safetensors"),
                              {n: policy[n] for n in base_names})
        if lora:
            with open(os.path.join(d, "adapter_config.json"), "w") as f:
                json.dump(ref.peft_adapter_config(lora), f, indent=2)
                f.write("\n")
            ref.write_safetensors(os.path.join(d, "adapter_model.safetensors"),
                                  {n: policy[n] for n in trainable})
        else:
            os.makedirs(os.path.join(d, "reference"), exist_ok=True)
            with open(os.path.join(d, "reference", "config.json"), "w") as f:
                json.dump(written, f, indent=2)
                f.write("\n")
            ref.write_safetensors(os.path.join(d, "reference", "model.safetensors"), reference)
        write_pairs(os.path.join(d, "pairs.jsonl"), pairs)
        expected = {"beta": case["beta"], "label_smoothing": case.get("label_smoothing", 0.0),
                    "simpo_gamma": case.get("simpo_gamma", 0.5), "losses": {}}
        for kind in LOSS_TYPES:
            loss, metrics, grads = loss_and_grads(cfg, policy, reference, pairs,
                                                  settings(case, kind), lora, trainable)
            expected["losses"][kind] = {"loss": loss, **metrics}
            ref.write_safetensors(os.path.join(d, "grads_%s.safetensors" % kind), grads)
            print("%-28s %-7s loss=%.17g margin=%.6g" % (name, kind, loss,
                                                         metrics["rewards/margins"]))
        # Policy = reference (a recipe's reference: base, or LoRA's adapters before any step:
        # zero B): the sigmoid loss is ln 2; its gradient is kept too.
        if not lora:
            loss, metrics, grads = loss_and_grads(cfg, policy, policy, pairs,
                                                  settings(case, "sigmoid"), lora, trainable)
            expected["self_sigmoid"] = {"loss": loss, **metrics}
            ref.write_safetensors(os.path.join(d, "grads_self_sigmoid.safetensors"), grads)
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f, indent=2)
            f.write("\n")


# --------------------------------------------------------------------------
# Self-check
# --------------------------------------------------------------------------


def loop_logps(cfg, P, pairs, lora=None):
    """Each sequence alone (no batch, no padding), its completion's log-probabilities summed
    token by token with math.log of a softmax written out."""
    out_c, out_r = [], []
    for p, c, r in pairs:
        for comp, out in ((c, out_c), (r, out_r)):
            seq = p + comp
            logits = ref.forward(cfg, P, [seq], lora)[0]
            total = 0.0
            for t in range(len(p), len(seq)):
                row = logits[t - 1].tolist()
                m = max(row)
                lse = m + math.log(sum(math.exp(v - m) for v in row))
                total += row[seq[t]] - lse
            out.append(total)
    return out_c, out_r


def loop_loss(s, pc, pr, rc, rr, nc, nr):
    """preference_loss's mean loss, one pair at a time in Python floats."""
    beta, ls, total = s["beta"], s["label_smoothing"], 0.0

    def log_sigmoid(x):
        return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))

    for i in range(len(pc)):
        if s["loss_type"] == "ipo":
            z = (pc[i] / nc[i] - pr[i] / nr[i]) - (rc[i] / nc[i] - rr[i] / nr[i])
            total += (z - 1 / (2 * beta)) ** 2
            continue
        if s["loss_type"] == "simpo":
            z = pc[i] / nc[i] - pr[i] / nr[i] - s["simpo_gamma"] / beta
        else:
            z = (pc[i] - pr[i]) - (rc[i] - rr[i])
        if s["loss_type"] == "hinge":
            total += max(0.0, 1 - beta * z)
        else:
            total += -(1 - ls) * log_sigmoid(beta * z) - ls * log_sigmoid(-beta * z)
    return total / len(pc)


def loop_metrics(s, pc, pr, rc, rr, nc, nr):
    """preference_loss's metrics, pair by pair in Python floats."""
    beta, B = s["beta"], len(pc)
    if s["loss_type"] == "simpo":
        ch = [beta * pc[i] / nc[i] for i in range(B)]
        rj = [beta * pr[i] / nr[i] for i in range(B)]
    else:
        ch = [beta * (pc[i] - rc[i]) for i in range(B)]
        rj = [beta * (pr[i] - rr[i]) for i in range(B)]
    return {"rewards/chosen": sum(ch) / B, "rewards/rejected": sum(rj) / B,
            "rewards/accuracies": sum(1.0 for i in range(B) if ch[i] > rj[i]) / B,
            "rewards/margins": sum(ch[i] - rj[i] for i in range(B)) / B,
            "logps/chosen": sum(pc) / B, "logps/rejected": sum(pr) / B}


def check_case(name, case):
    cfg, policy, reference, lora, trainable, pairs = case_models(case)
    P = {n: t.to(torch.float64) for n, t in policy.items()}
    R = {n: t.to(torch.float64) for n, t in reference.items()}
    # 1. The batched, padded, masked logps against each sequence alone, token by token.
    pc, pr, nc, nr = sequence_logps(cfg, P, pairs, lora)
    lc, lr = loop_logps(cfg, P, pairs, lora)
    assert torch.allclose(pc, torch.tensor(lc, dtype=torch.float64), rtol=0, atol=1e-10)
    assert torch.allclose(pr, torch.tensor(lr, dtype=torch.float64), rtol=0, atol=1e-10)
    rc, rr, _, _ = sequence_logps(cfg, R, pairs)
    for kind in LOSS_TYPES:
        s = settings(case, kind)
        # 2. The loss against the scalar loop.
        loss, metrics = preference_loss(s, pc, pr, rc, rr, nc, nr)
        scalars = [x.tolist() for x in (pc, pr, rc, rr, nc, nr)]
        want = loop_loss(s, *scalars)
        assert abs(loss.item() - want) <= 1e-12 * max(1.0, abs(want)), (kind, loss, want)
        for key, value in loop_metrics(s, *scalars).items():
            assert abs(metrics[key] - value) <= 1e-12 * max(1.0, abs(value)), (kind, key)
        # 3. The gradient against central differences on a few coordinates of two tensors.
        _, _, grads = loss_and_grads(cfg, policy, reference, pairs, s, lora, trainable)
        for tensor in list(grads)[:1] + list(grads)[-1:]:
            for k in (0, grads[tensor].numel() // 2):
                h = 1e-6
                bumped = {n: t.to(torch.float64).clone() for n, t in policy.items()}
                flat = bumped[tensor].view(-1)
                v = []
                for sign in (1, -1):
                    flat[k] += sign * h
                    a, b, cn, cr = sequence_logps(cfg, bumped, pairs, lora)
                    v.append(preference_loss(s, a, b, rc, rr, cn, cr)[0].item())
                    flat[k] -= sign * h
                fd = (v[0] - v[1]) / (2 * h)
                g = grads[tensor].view(-1)[k].item()
                assert abs(fd - g) <= 1e-6 + 1e-5 * abs(g), (name, kind, tensor, k, fd, g)
    # 4. Policy = reference: z = 0 for every pair, so the losses are known numbers.
    same = {n: t.to(torch.float64) for n, t in (reference.items() if lora else policy.items())}
    a, b, na, nb = sequence_logps(cfg, same, pairs)
    for kind, want in (("sigmoid", math.log(2)), ("hinge", 1.0),
                       ("ipo", (1 / (2 * case["beta"])) ** 2)):
        s = dict(settings(case, kind), label_smoothing=0.0)
        got = preference_loss(s, a, b, a, b, na, nb)[0].item()
        assert abs(got - want) <= 1e-12 * want, (kind, got, want)
    print("%-28s ok: logps = token loop, loss = scalar loop, gradient = differences, "
          "metrics = pair loop, policy = reference gives ln 2 / 1 / (1/2beta)^2" % name)


def check():
    for name, case in CASES.items():
        check_case(name, case)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="run the self-check")
    ap.add_argument("--out", help="write the fixtures under this directory")
    a = ap.parse_args()
    if not a.check and not a.out:
        ap.error("give --check or --out")
    torch.set_default_dtype(torch.float64)
    if a.check:
        check()
    if a.out:
        generate(a.out)


if __name__ == "__main__":
    main()
