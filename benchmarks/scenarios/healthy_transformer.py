"""healthy_transformer: a small decoder-only transformer LM (8 layers, d_model 1024, 16 heads, causal
scaled_dot_product_attention, context 1024, batch 8, vocabulary 32k) under bf16 autocast, token batches made on the
device, fused AdamW on CUDA. Expected: healthy (no cause to fix).
"""

from __future__ import annotations

import sys

import torch
from scenario_common import Meter, parse, pick_device
from torch import nn

FIXES: tuple[str, ...] = ()


class Layer(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width, bias=False)
        self.down = nn.Linear(4 * width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attention = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attention.transpose(1, 2).reshape(b, t, c))
        return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))


class LM(nn.Module):
    def __init__(self, vocab: int, width: int, depth: int, heads: int, context: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(torch.zeros(context, width))
        self.layers = nn.ModuleList(Layer(width, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def main(argv: list[str] | None = None) -> int:
    args = parse(__doc__, FIXES, argv)
    device = pick_device(args.device)
    cuda = device.type == "cuda"
    vocab, width, depth, heads, context, batch = (32768, 1024, 8, 16, 1024, 8) if cuda else (4096, 128, 2, 4, 128, 4)
    model = LM(vocab, width, depth, heads, context).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=cuda)
    generator = torch.Generator(device=device).manual_seed(0)
    pool = torch.randint(0, vocab, (16, batch, context + 1), device=device, generator=generator)
    meter = Meter("healthy_transformer", args.fix, device, args.duration, args.warmup, batch)
    for step in meter:
        tokens = pool[step % len(pool)]
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            loss = nn.functional.cross_entropy(logits.float().view(-1, vocab), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    meter.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
