#!/usr/bin/python3
"""relcl's Transformer, trained in PyTorch on relcl's own batches: the other side of
bench/vs-pytorch.py's comparison.

The model is relcl_model with relcl-train's defaults (include/relcl_model.h,
lib/model/model.c, model_graph.c): a post-norm encoder-decoder, one embedding table shared by
the source, the target and the output projection (scaled by sqrt(d_model) on the way in, no
output bias), Shaw et al. relative positions in every self-attention (keys and values, one
table of 2k+1 vectors per layer shared by its heads, r = clamp(j - i, -k, k) + k) or
sinusoidal absolute positions, dropout on the embeddings, the attention weights and every
residual branch, label-smoothed cross-entropy summed over the target tokens, Adam
(0.9, 0.98, 1e-9) on the mean with relcl's learning-rate schedule. The relative terms are in
the factored form of docs (P = Q wK^T gathered into the logits, the weights bucketed by label
times wV): no (n, n, d) tensor is built.

The data path is relcl's, step for step: the same text checks (BOM, CR, blank lines), the
same SentencePiece model (spm_encode), the same --max-length filter, and a port of
lib/io/data.c's batcher (splitmix64 Fisher-Yates, counting sort by max(S + 1, T + 1), cuts of
rows x longest <= --batch-tokens, the batches shuffled per epoch), so step s trains on the
batch relcl-train's step s trains on: the same target token counts (vs-pytorch.py checks).

The parameter count is computed as relcl-train prints it ("N parameters in M tensors"): the
tensors named and ordered as relcl's table; --expect-params/--expect-tensors make a
difference fatal.

usage: torch_transformer.py --train-src F --train-tgt F --spm-model F [model flags as
relcl-train's] [--steps N] [--warmup-steps W] [--json FILE] [--count-only]
Prints one line per step and a summary; exit 1 on any mismatch or error, 2 on bad flags.
"""
import argparse
import json
import lzma
import math
import os
import subprocess
import sys
import time

PAD, UNK, BOS, EOS = 0, 1, 2, 3  # relcl_data.h's reserved ids
MASK64 = (1 << 64) - 1


def openblas_core():
    """The kernel set OpenBLAS chose for this CPU (its DYNAMIC_ARCH core name), or None where
    the BLAS torch loaded is not OpenBLAS. OPENBLAS_CORETYPE in the environment overrides the
    choice: with it set to Haswell on the Zen 5 EPYC, torch.mm ran 1024^3 at 250 GFLOP/s
    against 440 with the AVX-512 core OpenBLAS picks itself (Cooperlake)."""
    import ctypes
    with open("/proc/self/maps") as f:
        libs = sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and "/" in ln})
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return None


def die(msg, code=1):
    print("torch_transformer: " + msg, file=sys.stderr)
    sys.exit(code)


try:
    import torch
    import torch.nn.functional as F
except ImportError:
    die("no PyTorch in %s: install python3-torch (scripts/deps.sh: relcl_install_torch)"
        % sys.executable)

# ---- text, as lib/io/text.c reads it ----------------------------------------------------


def read_text(path):
    """Lines of a text file (.xz read transparently): BOM dropped, one '\\r' before '\\n'
    dropped, strict UTF-8 and no NUL byte (relcl refuses those files too)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        die("%s: %s" % (path, e.strerror))
    if raw.startswith(b"\xfd7zXZ\x00"):
        try:
            raw = lzma.decompress(raw)
        except lzma.LZMAError as e:
            die("%s: %s" % (path, e))
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out = []
    for i, line in enumerate(lines, 1):
        if line.endswith(b"\r"):
            line = line[:-1]
        if b"\0" in line:
            die("%s:%d: NUL byte" % (path, i))
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            die("%s:%d: invalid UTF-8 (%s)" % (path, i, e.reason))
        out.append(line)
    return out


def blank(line):
    return all(c in b" \t" for c in line)


def spm_encode(model, lines, what):
    """Ids of each line by the spm_encode CLI (Debian `sentencepiece`): the library call
    relcl's lib/io/spm.cc makes (SentencePieceProcessor::Encode, no extra options)."""
    try:
        r = subprocess.run(["spm_encode", "--model=" + model, "--output_format=id"],
                           input=b"".join(l + b"\n" for l in lines), capture_output=True)
    except FileNotFoundError:
        die("spm_encode not found: install Debian's sentencepiece (scripts/deps.sh)")
    if r.returncode != 0:
        die("spm_encode on %s failed: %s" % (what, r.stderr.decode(errors="replace").strip()))
    out = r.stdout.decode().split("\n")
    if out and out[-1] == "":
        out.pop()
    if len(out) != len(lines):
        die("spm_encode on %s: %d lines in, %d out" % (what, len(lines), len(out)))
    return [[int(t) for t in s.split()] for s in out]


def load_corpus(src_path, tgt_path, spm, max_length):
    a, b = read_text(src_path), read_text(tgt_path)
    if len(a) != len(b):
        die("%s and %s: line counts differ (%d, %d)" % (src_path, tgt_path, len(a), len(b)))
    keep = [i for i in range(len(a)) if not blank(a[i]) and not blank(b[i])]
    xs = spm_encode(spm, [a[i] for i in keep], src_path)
    ys = spm_encode(spm, [b[i] for i in keep], tgt_path)
    stats = {"lines": len(a), "pairs": 0, "empty": len(a) - len(keep), "too_long": 0,
             "src_tokens": 0, "tgt_tokens": 0}
    pairs = []
    for x, y in zip(xs, ys):
        if not x or not y:
            stats["empty"] += 1
        elif max_length > 0 and (len(x) > max_length or len(y) > max_length):
            stats["too_long"] += 1
        else:
            pairs.append((x, y))
            stats["src_tokens"] += len(x)
            stats["tgt_tokens"] += len(y)
    stats["pairs"] = len(pairs)
    return pairs, stats


# ---- batches, as lib/io/data.c cuts and orders them -------------------------------------


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def fisher_yates(state, a):
    for i in range(len(a) - 1, 0, -1):
        n = i + 1
        threshold = ((1 << 64) - n) % n  # (0 - n) % n in uint64: no modulo bias
        while True:
            state, z = splitmix64(state)
            if z >= threshold:
                break
        j = z % n
        a[i], a[j] = a[j], a[i]
    return state


class Batcher:
    """relcl_batcher with relcl_batch_opts_default: EOS after every source, shuffled."""

    def __init__(self, pairs, batch_tokens, seed):
        self.pairs = pairs
        self.seed = seed
        self.cost = [max(len(x) + 1, len(y) + 1) for x, y in pairs]
        longest = max(self.cost)
        if batch_tokens < longest:
            die("--batch-tokens %d is below the longest pair (%d tokens with BOS/EOS)"
                % (batch_tokens, longest), 2)
        order = self.sort_by_cost(list(range(len(pairs))))
        self.cut, start = [], 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end - start + 1) * self.cost[order[end]] <= batch_tokens:
                end += 1
            self.cut.append(start)
            start = end
        self.cut.append(len(order))
        self.nb = len(self.cut) - 1
        self.plan_epoch = None

    def sort_by_cost(self, items):  # stable, like the counting sort
        return sorted(items, key=lambda p: self.cost[p])

    def plan(self, epoch):
        if self.plan_epoch == epoch:
            return
        shuffled = list(range(len(self.pairs)))
        state = (self.seed ^ ((0xD1B54A32D192ED03 * (epoch + 1)) & MASK64)) & MASK64
        state = fisher_yates(state, shuffled)
        self.order = self.sort_by_cost(shuffled)
        self.perm = list(range(self.nb))
        fisher_yates(state, self.perm)
        self.plan_epoch = epoch

    def get(self, n):
        """Batch n (0-based) of the run: epoch n // nb, index n % nb, as relcl_batcher_next."""
        epoch, index = divmod(n, self.nb)
        self.plan(epoch)
        k = self.perm[index]
        rows = [self.pairs[p] for p in self.order[self.cut[k]:self.cut[k + 1]]]
        S = max(len(x) + 1 for x, _ in rows)
        T = max(len(y) + 1 for _, y in rows)
        src = [x + [EOS] + [PAD] * (S - len(x) - 1) for x, _ in rows]
        tin = [[BOS] + y + [PAD] * (T - len(y) - 1) for _, y in rows]
        tout = [y + [EOS] + [PAD] * (T - len(y) - 1) for _, y in rows]
        return src, [len(x) + 1 for x, _ in rows], tin, tout, [len(y) + 1 for _, y in rows]


# ---- the model --------------------------------------------------------------------------


def xavier(t, fan_out, fan_in):
    a = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        t.uniform_(-a, a)


class Attention(torch.nn.Module):
    """wq|wk|wv as one (3D, D) matrix (relcl packs them adjacent too), wo, and with relative
    positions the layer's shared tables rel_k, rel_v (2k+1, dh)."""

    def __init__(self, D, H, rel_k):
        super().__init__()
        self.D, self.H, self.dh, self.k = D, H, D // H, rel_k
        self.w = torch.nn.Parameter(torch.empty(3 * D, D))
        for i in range(3):
            xavier(self.w[i * D:(i + 1) * D], D, D)
        self.b = torch.nn.Parameter(torch.zeros(3 * D))
        self.wo = torch.nn.Parameter(torch.empty(D, D))
        xavier(self.wo, D, D)
        self.bo = torch.nn.Parameter(torch.zeros(D))
        if rel_k is not None:
            L = 2 * rel_k + 1
            self.rel_k = torch.nn.Parameter(torch.empty(L, self.dh))
            self.rel_v = torch.nn.Parameter(torch.empty(L, self.dh))
            xavier(self.rel_k, L, self.dh)
            xavier(self.rel_v, L, self.dh)

    def tensors(self, prefix):
        D, out = self.D, []
        for i, n in enumerate("qkv"):
            out.append(("%s.w%s.weight" % (prefix, n), self.w[i * D:(i + 1) * D]))
        for i, n in enumerate("qkv"):
            out.append(("%s.w%s.bias" % (prefix, n), self.b[i * D:(i + 1) * D]))
        out += [(prefix + ".wo.weight", self.wo), (prefix + ".wo.bias", self.bo)]
        if self.k is not None:
            out += [(prefix + ".rel_k", self.rel_k), (prefix + ".rel_v", self.rel_v)]
        return out

    def heads(self, x):  # (B, n, D) -> (B, H, n, dh)
        B, n, _ = x.shape
        return x.view(B, n, self.H, self.dh).transpose(1, 2)

    def forward(self, x, mem, mask, p, ridx):
        """x (B, nq, D); mem (B, nk, D) or None (self-attention); mask (B or 1, 1, nq or 1,
        nk) True where a key is allowed; ridx (nq, nk) relative labels or None."""
        D = self.D
        if mem is None:
            q, k, v = F.linear(x, self.w, self.b).split(D, dim=-1)
        else:
            q = F.linear(x, self.w[:D], self.b[:D])
            k, v = F.linear(mem, self.w[D:], self.b[D:]).split(D, dim=-1)
        q, k, v = self.heads(q), self.heads(k), self.heads(v)
        e = torch.matmul(q, k.transpose(-1, -2))  # (B, H, nq, nk)
        if ridx is not None:
            idx = ridx.expand(e.shape)
            # e_ij += q_i . wK[r(i,j)]: (B, H, nq, 2k+1) logits gathered by label
            e = e + torch.matmul(q, self.rel_k.t()).gather(-1, idx)
        e = (e * (1.0 / math.sqrt(self.dh))).masked_fill(~mask, float("-inf"))
        a = F.dropout(torch.softmax(e, dim=-1), p, self.training)
        z = torch.matmul(a, v)
        if ridx is not None:
            # z_i += sum_j a_ij wV[r(i,j)]: the weights summed per label, times wV
            L = self.rel_v.shape[0]
            bucket = a.new_zeros(a.shape[:-1] + (L,)).scatter_add(-1, idx, a)
            z = z + torch.matmul(bucket, self.rel_v)
        B, _, nq, _ = z.shape
        return F.linear(z.transpose(1, 2).reshape(B, nq, D), self.wo, self.bo)


class FFN(torch.nn.Module):
    def __init__(self, D, Fd):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.empty(Fd, D))
        xavier(self.w1, Fd, D)
        self.b1 = torch.nn.Parameter(torch.zeros(Fd))
        self.w2 = torch.nn.Parameter(torch.empty(D, Fd))
        xavier(self.w2, D, Fd)
        self.b2 = torch.nn.Parameter(torch.zeros(D))

    def tensors(self, prefix):
        return [(prefix + ".w1.weight", self.w1), (prefix + ".w1.bias", self.b1),
                (prefix + ".w2.weight", self.w2), (prefix + ".w2.bias", self.b2)]

    def forward(self, x):
        return F.linear(F.relu(F.linear(x, self.w1, self.b1)), self.w2, self.b2)


class Norm(torch.nn.LayerNorm):
    def __init__(self, D):
        super().__init__(D, eps=1e-5)  # RELCL__LN_EPS

    def tensors(self, prefix):
        return [(prefix + ".weight", self.weight), (prefix + ".bias", self.bias)]


class Transformer(torch.nn.Module):
    def __init__(self, a, vocab):
        super().__init__()
        D = a.d_model
        self.a, self.D, self.V = a, D, vocab
        rel = a.max_relative_position if a.positions in ("relative", "both") else None
        self.emb = torch.nn.Parameter(torch.randn(vocab, D) / math.sqrt(D))
        with torch.no_grad():
            self.emb[PAD].zero_()
        M = torch.nn.ModuleList
        self.enc = M([M([Attention(D, a.heads, rel), Norm(D), FFN(D, a.d_ff), Norm(D)])
                      for _ in range(a.enc_layers)])
        self.dec = M([M([Attention(D, a.heads, rel), Norm(D), Attention(D, a.heads, None),
                         Norm(D), FFN(D, a.d_ff), Norm(D)]) for _ in range(a.dec_layers)])
        self.rel = rel

    def tensors(self):
        """(name, tensor) in the order of relcl's table
        (lib/model/model.c build_table)."""
        out = [("emb.weight", self.emb)]
        for l, (sa, n1, ff, n2) in enumerate(self.enc):
            out += sa.tensors("enc.%d.self_attn" % l) + n1.tensors("enc.%d.norm1" % l)
            out += ff.tensors("enc.%d.ffn" % l) + n2.tensors("enc.%d.norm2" % l)
        for l, (sa, n1, ca, n2, ff, n3) in enumerate(self.dec):
            out += sa.tensors("dec.%d.self_attn" % l) + n1.tensors("dec.%d.norm1" % l)
            out += ca.tensors("dec.%d.cross_attn" % l) + n2.tensors("dec.%d.norm2" % l)
            out += ff.tensors("dec.%d.ffn" % l) + n3.tensors("dec.%d.norm3" % l)
        return out

    def embed(self, ids, p):
        x = F.embedding(ids, self.emb) * math.sqrt(self.D)
        if self.a.positions in ("absolute", "both"):
            x = x + sinusoid(ids.shape[1], self.D)
        return F.dropout(x, p, self.training)

    def labels(self, nq, nk):
        if self.rel is None:
            return None
        i = torch.arange(nq).view(-1, 1)
        j = torch.arange(nk).view(1, -1)
        return ((j - i).clamp(-self.rel, self.rel) + self.rel).view(1, 1, nq, nk)

    def forward(self, src, src_lens, tin, tout, eps):
        p = self.a.dropout if self.training else 0.0
        B, S = src.shape
        T = tin.shape[1]
        smask = (torch.arange(S).view(1, S) < src_lens.view(B, 1)).view(B, 1, 1, S)
        tmask = torch.ones(T, T, dtype=torch.bool).tril().view(1, 1, T, T)
        x = self.embed(src, p)
        rs = self.labels(S, S)
        for sa, n1, ff, n2 in self.enc:  # post-norm: y = LN(x + dropout(F(x)))
            x = n1(x + F.dropout(sa(x, None, smask, p, rs), p, self.training))
            x = n2(x + F.dropout(ff(x), p, self.training))
        mem = x
        y = self.embed(tin, p)
        rt = self.labels(T, T)
        for sa, n1, ca, n2, ff, n3 in self.dec:
            y = n1(y + F.dropout(sa(y, None, tmask, p, rt), p, self.training))
            y = n2(y + F.dropout(ca(y, mem, smask, p, None), p, self.training))
            y = n3(y + F.dropout(ff(y), p, self.training))
        z = F.linear(y.reshape(B * T, self.D), self.emb)  # tied output projection
        lp = F.log_softmax(z, dim=-1)
        t = tout.reshape(-1)
        keep = t != PAD
        nll = -lp.gather(1, t.view(-1, 1)).squeeze(1)
        # (1 - eps) nll + eps (lse - mean z): the target distribution puts eps / V on every id
        loss = ((1.0 - eps) * nll - eps * lp.mean(dim=-1))[keep].sum()
        return loss, nll.detach()[keep].sum()


_sinusoids = {}


def sinusoid(n, D):
    """kernels/posenc.cl: x[t, c] += sin(t w) (c even) or cos(t w) (c odd),
    w = 10000^(-(c & ~1) / D)."""
    key = (n, D)
    if key not in _sinusoids:
        c = torch.arange(D)
        w = torch.exp(-(c - c % 2).float() * (math.log(10000.0) / D))
        ang = torch.arange(n).float().view(n, 1) * w.view(1, D)
        _sinusoids[key] = torch.where(c % 2 == 1, torch.cos(ang), torch.sin(ang))
    return _sinusoids[key]


def relcl_count(model):
    """(parameters, tensors), after checking that the named tensors cover every parameter of
    the module exactly once."""
    tab = model.tensors()
    owned = {}
    for name, t in tab:
        owned.setdefault(t.storage().data_ptr(), []).append((t.data_ptr(), t.numel(), name))
    plain = 0
    for prm in model.parameters():
        views = sorted(owned.pop(prm.storage().data_ptr(), []))
        at = prm.data_ptr()
        for ptr, n, name in views:
            if ptr != at:
                die("tensor table: %s does not follow on from the previous tensor" % name)
            at += n * prm.element_size()
        if at != prm.data_ptr() + prm.numel() * prm.element_size():
            die("tensor table: a parameter of shape %s is not covered" % list(prm.shape))
        plain += prm.numel()
    if owned:
        die("tensor table: names a tensor that is no parameter")
    return plain, len(tab)


def load_relcl_checkpoint(model, path):
    """Copy the parameters of a relcl checkpoint (safetensors: an 8-byte header length, a
    JSON header, the data) into the model by relcl's tensor names; relcl-train's Adam moments
    ("adam_m/...", "adam_v/...") are skipped."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        n = int.from_bytes(raw[:8], "little")
        head = json.loads(raw[8:8 + n])
    except (OSError, ValueError) as e:
        die("%s: not a safetensors file (%s)" % (path, e))
    names = {k for k in head if k != "__metadata__" and not k.startswith("adam_")}
    with torch.no_grad():
        for name, t in model.tensors():
            e = head.get(name)
            if e is None or e["dtype"] != "F32" or e["shape"] != list(t.shape):
                die("%s: tensor %s is %s, the model's is F32 %s"
                    % (path, name, e and (e["dtype"], e["shape"]), list(t.shape)))
            a, b = e["data_offsets"]
            t.copy_(torch.frombuffer(bytearray(raw[8 + n + a:8 + n + b]),
                                     dtype=torch.float32).view(t.shape))
            names.discard(name)
    if names:
        die("%s: tensors the model does not have: %s" % (path, ", ".join(sorted(names))))


def check_step(a, vocab, batcher):
    """relcl's step a.check_step from its checkpoint of the step before, here: relcl's
    parameters, dropout 0 (then nothing random is left), the batch of that step; the loss and
    the gradient norm must be relcl's. The loss is averaged over thousands of tokens and so
    moves little with the model's details near its start; the gradient norm moves at first
    order with every term (measured on a tiny model after 25 steps: a missing causal mask, a
    reversed relative label, a missing sqrt(d_model) or 1/sqrt(dh), no label smoothing, q and
    k swapped, no relative keys or values term: each moves one of the two by 7e-5 or more)."""
    b = argparse.Namespace(**vars(a))
    b.dropout = 0.0
    model = Transformer(b, vocab)
    load_relcl_checkpoint(model, a.check_checkpoint)
    model.train()
    src, slen, tin, tout, tlen = batcher.get(a.check_step - 1)
    tokens = sum(tlen)
    loss, _ = model(torch.tensor(src), torch.tensor(slen), torch.tensor(tin), torch.tensor(tout),
                    a.label_smoothing)
    (loss / tokens).backward()
    gnorm = math.sqrt(sum(float((q.grad.double() ** 2).sum()) for q in model.parameters()
                          if q.grad is not None))
    loss = loss.item() / tokens
    print("relcl's checkpoint %s, step %d without dropout: loss %.6f, gradient norm %.6f here"
          % (a.check_checkpoint, a.check_step, loss, gnorm))
    if a.expect_loss is not None and a.expect_gnorm is not None:
        print("relcl: loss %.6f, gradient norm %.6f" % (a.expect_loss, a.expect_gnorm))
        # float32 sums in another order, and relcl's log rounds to 6 digits: measured 1e-6
        # apart on the tiny model; 3e-5 relative still sees the relative keys' term there
        if not (abs(loss - a.expect_loss) <= 3e-5 * abs(a.expect_loss)
                and abs(gnorm - a.expect_gnorm) <= 3e-5 * abs(a.expect_gnorm)):
            die("relcl's parameters give loss %.6f and gradient norm %.6f here, %.6f and %.6f "
                "in relcl: not the same model" % (loss, gnorm, a.expect_loss, a.expect_gnorm))
    return {"checkpoint": a.check_checkpoint, "step": a.check_step, "loss": loss,
            "gnorm": gnorm, "relcl_loss": a.expect_loss, "relcl_gnorm": a.expect_gnorm}


def lr_schedule(d_model, step, warmup, scale):
    s, w = max(step, 1), max(warmup, 1)
    return scale / math.sqrt(d_model) * min(s ** -0.5, s * w ** -1.5)


def spm_vocab(model):
    try:
        r = subprocess.run(["spm_export_vocab", "--model=" + model], capture_output=True)
    except FileNotFoundError:
        die("spm_export_vocab not found: install Debian's sentencepiece (scripts/deps.sh)")
    if r.returncode != 0:
        die("%s: %s" % (model, r.stderr.decode(errors="replace").strip() or "not a model"))
    return len(r.stdout.splitlines())


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train-src", required=True)
    ap.add_argument("--train-tgt", required=True)
    ap.add_argument("--spm-model", required=True, help="the spm.model relcl-train used")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--enc-layers", type=int)
    ap.add_argument("--dec-layers", type=int)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--positions", choices=("absolute", "relative", "both"), default="relative")
    ap.add_argument("--max-relative-position", type=int, default=16)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--batch-tokens", type=int, default=4000)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=4000, help="learning-rate warm-up steps")
    ap.add_argument("--lr-scale", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10, help="training steps (updates)")
    ap.add_argument("--warmup-steps", type=int, default=2,
                    help="first steps left out of the summary's rate")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--expect-params", type=int, help="relcl-train's N parameters")
    ap.add_argument("--expect-tensors", type=int, help="relcl-train's M tensors")
    ap.add_argument("--count-only", action="store_true", help="build the model, count, exit")
    ap.add_argument("--check-checkpoint", metavar="CKPT",
                    help="first redo relcl's --check-step from its checkpoint CKPT of the "
                    "step before, without dropout")
    ap.add_argument("--check-step", type=int)
    ap.add_argument("--expect-loss", type=float, help="relcl's loss at --check-step")
    ap.add_argument("--expect-gnorm", type=float, help="relcl's gradient norm there")
    ap.add_argument("--json", help="write the summary here as JSON")
    a = ap.parse_args(argv)
    a.enc_layers = a.enc_layers or a.layers
    a.dec_layers = a.dec_layers or a.layers
    if a.d_model < 1 or a.heads < 1 or a.d_model % a.heads:
        ap.error("--d-model must be a positive multiple of --heads")
    if a.steps < 1 or not 0 <= a.warmup_steps < a.steps:
        ap.error("need --steps >= 1 and 0 <= --warmup-steps < --steps")
    if a.check_checkpoint and not (a.check_step or 0) >= 1:
        ap.error("--check-checkpoint needs --check-step >= 1")
    if a.threads < 1 or a.batch_tokens < 1 or a.max_relative_position < 0:
        ap.error("--threads, --batch-tokens must be >= 1, --max-relative-position >= 0")
    return a


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    vocab = spm_vocab(a.spm_model)
    model = Transformer(a, vocab)
    nparam, ntens = relcl_count(model)
    print("torch %s, %d threads; model: %d+%d layers, d_model %d, %d heads, d_ff %d, %s, "
          "vocab %d; %d parameters in %d tensors"
          % (torch.__version__, torch.get_num_threads(), a.enc_layers, a.dec_layers, a.d_model,
             a.heads, a.d_ff, a.positions if a.positions == "absolute"
             else "%s k=%d" % (a.positions, a.max_relative_position), vocab, nparam, ntens),
          flush=True)
    if a.expect_params is not None or a.expect_tensors is not None:
        print("relcl: %s parameters in %s tensors" % (a.expect_params, a.expect_tensors))
        if (a.expect_params is not None and a.expect_params != nparam) or \
                (a.expect_tensors is not None and a.expect_tensors != ntens):
            die("parameter count differs from relcl's: %d parameters in %d tensors here, %s in "
                "%s there: not the same model" % (nparam, ntens, a.expect_params,
                                                  a.expect_tensors))
    summary = {"torch": torch.__version__, "threads": torch.get_num_threads(),
               "openblas_core": openblas_core(),
               "openblas_coretype_env": os.environ.get("OPENBLAS_CORETYPE"),
               "params": nparam, "tensors": ntens,
               "positions": a.positions, "vocab": vocab}
    if a.count_only:
        write_json(a.json, summary)
        return 0

    t = time.perf_counter()
    pairs, stats = load_corpus(a.train_src, a.train_tgt, a.spm_model, a.max_length)
    if not pairs:
        die("the corpus is empty")
    batcher = Batcher(pairs, a.batch_tokens, a.seed)
    print("train: %s + %s: %d lines, %d pairs kept, %d empty skipped, %d too long (> %d "
          "subwords) skipped; %d + %d subwords" % (a.train_src, a.train_tgt, stats["lines"],
                                                  stats["pairs"], stats["empty"],
                                                  stats["too_long"], a.max_length,
                                                  stats["src_tokens"], stats["tgt_tokens"]))
    print("batches: %d per epoch of at most %d tokens; read in %.1f s"
          % (batcher.nb, a.batch_tokens, time.perf_counter() - t), flush=True)
    summary["corpus"] = stats
    summary["batches_per_epoch"] = batcher.nb
    if a.check_checkpoint:
        summary["check"] = check_step(a, vocab, batcher)
        torch.manual_seed(a.seed)  # the same dropout masks below as without the check

    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    steps = []
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        src, slen, tin, tout, tlen = batcher.get(step - 1)
        src, slen = torch.tensor(src), torch.tensor(slen)
        tin, tout = torch.tensor(tin), torch.tensor(tout)
        tokens = sum(tlen)
        opt.zero_grad(set_to_none=True)
        loss, nll = model(src, slen, tin, tout, a.label_smoothing)
        (loss / tokens).backward()  # relcl: the summed loss's gradient times 1/tokens
        gnorm = torch.norm(torch.stack([torch.norm(q.grad) for q in params if q.grad is not None]))
        lr = lr_schedule(a.d_model, step, a.warmup, a.lr_scale)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        loss_v, nll_v, gnorm_v = loss.item() / tokens, nll.item() / tokens, gnorm.item()
        dt = time.perf_counter() - t0
        if not (math.isfinite(loss_v) and math.isfinite(gnorm_v)):
            die("training diverged at step %d (loss %g, gradient norm %g)" % (step, loss_v,
                                                                             gnorm_v))
        steps.append({"step": step, "tokens": tokens, "seconds": dt, "loss": loss_v,
                      "nll": nll_v, "gnorm": gnorm_v, "rows": len(tlen),
                      "src_len": src.shape[1], "tgt_len": tin.shape[1]})
        print("step %7d | loss %.4f | ppl %9.2f | lr %.3e | gnorm %.3f | %5d tokens "
              "(%d x %d/%d) | %6.0f tok/s | %.2f s" % (step, loss_v, math.exp(nll_v), lr,
                                                       gnorm_v, tokens, len(tlen),
                                                       src.shape[1], tin.shape[1], tokens / dt,
                                                       dt), flush=True)
    steady = steps[a.warmup_steps:]
    tok, sec = sum(s["tokens"] for s in steady), sum(s["seconds"] for s in steady)
    rates = sorted(s["tokens"] / s["seconds"] for s in steady)
    summary.update({"steps": steps, "warmup_steps": a.warmup_steps,
                    "tokens_per_s": tok / sec, "median_step_tokens_per_s": rates[len(rates) // 2],
                    "initial_loss": steps[0]["loss"], "ln_vocab": math.log(vocab)})
    print("done: steps %d-%d: %d target tokens in %.2f s, %.0f tok/s (step median %.0f); "
          "initial loss %.3f, ln(vocab) %.3f" % (a.warmup_steps + 1, a.steps, tok, sec,
                                                 tok / sec, rates[len(rates) // 2],
                                                 steps[0]["loss"], math.log(vocab)))
    write_json(a.json, summary)
    return 0


def write_json(path, obj):
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
