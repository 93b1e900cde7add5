"""A token bucket: how the hook's server keeps accepts and each client's input within a budget."""

from __future__ import annotations


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved up. `spend` may go into debt, at most `burst` deep; `take` never
    does. A deeper debt would only mean a longer blackout: one long piece of work (a full collection of the job's
    heap run on the server's thread) must not silence the server for tens of seconds."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.stamp = now

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def take(self, now: float, amount: float = 1.0) -> bool:
        """Spend `amount` if that many tokens are there; False (and nothing spent) otherwise."""
        self._refill(now)
        if self.tokens < amount:
            return False
        self.tokens -= amount
        return True

    def spend(self, now: float, amount: float) -> None:
        """Take `amount` tokens at time `now` (the bucket may go below zero: a debt of at most `burst`)."""
        self._refill(now)
        self.tokens = max(-self.burst, self.tokens - amount)

    def wait_s(self, now: float, amount: float = 1.0) -> float:
        """Seconds until `amount` tokens are there (0: now)."""
        self._refill(now)
        return max(0.0, (amount - self.tokens) / self.rate)
