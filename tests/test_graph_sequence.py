"""Model import of attention and recurrent layers (``graph.torch_attention``,
``graph.torch_rnn``): masked and multi-head attention, LSTM, GRU and RNN unrolled,
each against PyTorch on random inputs and weights."""

import pytest
from graph_common import check, randomized

import tensortune as tt

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


def test_attention_with_masks_and_multihead_attention():
    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            keep = torch.rand(5, 5) > 0.3
            keep[:, 0] = True                           # no row without a key
            self.register_buffer("keep", keep)
            self.register_buffer("bias", torch.randn(5, 5))

        def forward(self, x):
            return (F.scaled_dot_product_attention(x, x, x, attn_mask=self.keep)
                    + F.scaled_dot_product_attention(x, x, x, attn_mask=self.bias, scale=0.3))
    check(Masked().eval(), torch.randn(2, 5, 8))

    class Grouped(nn.Module):              # 4 query heads over 2 key/value heads
        def __init__(self):
            super().__init__()
            self.register_buffer("kv", torch.randn(2, 2, 6, 8))

        def forward(self, q):
            return F.scaled_dot_product_attention(q, self.kv, self.kv * 0.5, enable_gqa=True)
    check(Grouped().eval(), torch.randn(2, 4, 5, 8))

    for batch_first in (True, False):
        mha = randomized(nn.MultiheadAttention(16, 4, batch_first=batch_first))

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.mha = mha

            def forward(self, x):
                return self.mha(x, x, x, need_weights=False)[0] + x
        compiled = check(Block().eval(), torch.randn(2, 5, 16))
        # task names past 28 characters are printed whole
        assert max(len(t.name) for t in compiled.tasks) > 28
        assert all(t.name in compiled.summary() for t in compiled.tasks)

    class WithMasks(nn.Module):
        """Padded keys (bool, true where padding) and a causal bool mask (true where a
        query may not look) on a cross-attention; a float mask per batch and head on a
        self-attention."""
        def __init__(self):
            super().__init__()
            self.cross = randomized(nn.MultiheadAttention(16, 4, batch_first=True))
            self.own = randomized(nn.MultiheadAttention(16, 2))
            pad = torch.zeros(2, 5, dtype=torch.bool)
            pad[0, 3:] = True
            self.register_buffer("pad", pad)
            self.register_buffer("later", torch.ones(5, 5, dtype=torch.bool).triu(1))
            self.register_buffer("bias", torch.randn(2 * 2, 5, 5))

        def forward(self, x, mem):
            y = self.cross(x, mem, mem, key_padding_mask=self.pad, attn_mask=self.later,
                           need_weights=False)[0]
            z = y.transpose(0, 1)
            own = self.own(z, z, z, attn_mask=self.bias, need_weights=False)[0]
            return y + own.transpose(0, 1)
    model, args = WithMasks().eval(), (torch.randn(2, 5, 16), torch.randn(2, 5, 16))
    compiled = tt.compile_model(model, args)
    with torch.no_grad():
        want = model(*args)
    assert float(want.abs().max()) > 0
    assert float((compiled(*args) - want).abs().max()) <= 1e-5 * float(want.abs().max())


def test_lstm_gru_and_rnn_unrolled_match_torch():
    """Outputs and final states, picked as models pick them (``out, (h, c) = lstm(x)``),
    of one and two layers, both directions, batch first, without bias, an LSTM with
    ``proj_size``."""
    class Pick(nn.Module):
        def __init__(self, rnn, pick):
            super().__init__()
            self.rnn, self.pick = rnn, pick

        def forward(self, x):
            return self.pick(self.rnn(x))

    def lstm_parts(y):
        out, (h, c) = y
        return out[-1] + h.sum(0) - c[0]
    cases = [
        (nn.LSTM(8, 16), lstm_parts, (5, 2, 8)),
        (nn.LSTM(6, 12, num_layers=2, bidirectional=True, batch_first=True),
         lambda y: y[0], (2, 4, 6)),
        (nn.GRU(8, 16), lambda y: y[0] + y[1][-1], (4, 3, 8)),
        (nn.GRU(8, 10, bidirectional=True, bias=False), lambda y: y[1], (3, 2, 8)),
        (nn.RNN(5, 7, num_layers=2, nonlinearity="relu", batch_first=True),
         lambda y: y[0][:, -1] + y[1][1], (2, 4, 5)),
        (nn.RNN(5, 7), lambda y: y[0], (4, 2, 5)),
        # projected: h of 4 (the output's too), c of 10
        (nn.LSTM(6, 10, proj_size=4, num_layers=2, bidirectional=True),
         lambda y: torch.cat([y[0].flatten(), y[1][0].flatten(), y[1][1].flatten()]),
         (3, 2, 6)),
    ]
    for rnn, pick, shape in cases:
        compiled = check(randomized(Pick(rnn, pick)), torch.randn(*shape))
        steps = shape[1] if rnn.batch_first else shape[0]
        # the hidden-state products of the steps after the first are one task
        assert max(t.weight for t in compiled.tasks) >= steps - 1


def test_recurrent_layers_start_from_the_initial_state_given():
    """A GRU from a constant state made in forward; a 2-layer bidirectional LSTM, and a
    projected 2-layer one, from (h_0, c_0) given as model inputs, picked per layer and
    direction."""
    check(randomized(_WithState()), torch.randn(3, 2, 4))

    class Stateful(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(5, 6, num_layers=2, bidirectional=True)

        def forward(self, x, h0, c0):
            out, (h, c) = self.rnn(x, (h0, c0))
            return out.sum(0)[:, 6:] + h[3] - c[1]

    class Projected(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(5, 6, num_layers=2, proj_size=3)

        def forward(self, x, h0, c0):
            out, (h, c) = self.rnn(x, (h0, c0))
            return torch.cat([out.flatten(), h.flatten(), c.flatten()])

    for model, args in (
            (randomized(Stateful()),
             (torch.randn(4, 2, 5), torch.randn(4, 2, 6), torch.randn(4, 2, 6))),
            (randomized(Projected()),
             (torch.randn(4, 2, 5), torch.randn(2, 2, 3), torch.randn(2, 2, 6)))):
        compiled = tt.compile_model(model, args)
        with torch.no_grad():
            want = model(*args)
        got = compiled(*args)
        assert float(want.abs().max()) > 0
        assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())


class _WithState(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(4, 4)

    def forward(self, x):
        return self.gru(x, torch.ones(1, 2, 4) * 0.5)[0]
