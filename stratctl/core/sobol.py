"""Scrambled Sobol' points, exactly those of SciPy's `qmc.Sobol(d, scramble=True, seed=seed)`.

The quasi-random strategy draws its unit points here. SciPy computes the same points but
takes most of a second to import, more than everything else `stratctl validate` does; this
module needs nothing beyond the standard library for studies of up to 64 sampled
parameters (SciPy is imported above that). The points must stay those of SciPy: a trial's
name is a hash of its parameters, so other points would be other trials.

It is the classic construction: direction numbers of Joe and Kuo (new-joe-kuo-6.21201,
search criterion D(6); S. Joe and F. Y. Kuo, "Constructing Sobol sequences with better
two-dimensional projections", SIAM J. Sci. Comput. 30, 2008), the Bratley-Fox recurrence,
a Gray-code walk, and linear matrix scrambling (Matoušek) plus a digital shift, whose
random bits come from NumPy's default generator (PCG64 seeded by a SeedSequence),
reproduced here bit for bit. tests/unit/test_sobol.py checks each step against NumPy and
SciPy.
"""

from __future__ import annotations

BITS = 30  # SciPy's default: points are multiples of 2**-30
MAX_DIMS = 64

# Joe-Kuo dimensions 2..64, each "poly:m1,m2,...": the primitive polynomial (with its
# leading and trailing ones) and its initial direction numbers. Dimension 1 is the
# van der Corput sequence and needs none.
_DIRECTIONS = (
    "3:1 7:1,3 11:1,3,1 13:1,1,1 19:1,1,3,3 25:1,3,5,13 37:1,1,5,5,17 41:1,1,5,5,5 47:1,1,7,11,19 "
    "55:1,1,5,1,1 59:1,1,1,3,11 61:1,3,5,5,31 67:1,3,3,9,7,49 91:1,1,1,15,21,21 97:1,3,1,13,27,49 "
    "103:1,1,1,15,7,5 109:1,3,1,15,13,25 115:1,1,5,5,19,61 131:1,3,7,11,23,15,103 "
    "137:1,3,7,13,13,15,69 143:1,1,3,13,7,35,63 145:1,3,5,9,1,25,53 157:1,3,1,13,9,35,107 "
    "167:1,3,1,5,27,61,31 171:1,1,5,11,19,41,61 185:1,3,5,3,3,13,69 191:1,1,7,13,1,19,1 "
    "193:1,3,7,5,13,19,59 203:1,1,3,9,25,29,41 211:1,3,5,13,23,1,55 213:1,3,7,3,13,59,17 "
    "229:1,3,1,3,5,53,69 239:1,1,5,5,23,33,13 241:1,1,7,7,1,61,123 247:1,1,7,9,13,61,49 "
    "253:1,3,3,5,3,55,33 285:1,3,1,15,31,13,49,245 299:1,3,5,15,31,59,63,97 301:1,3,1,11,11,11,77,249 "
    "333:1,3,1,11,27,43,71,9 351:1,1,7,15,21,11,81,45 355:1,3,7,3,25,31,65,79 357:1,3,1,1,19,11,3,205 "
    "361:1,1,5,9,19,21,29,157 369:1,3,7,11,1,33,89,185 391:1,3,3,3,15,9,79,71 "
    "397:1,3,7,11,15,39,119,27 425:1,1,3,1,11,31,97,225 451:1,1,1,3,23,43,57,177 "
    "463:1,3,7,7,17,17,37,71 487:1,3,1,5,27,63,123,213 501:1,1,3,5,11,43,53,133 "
    "529:1,3,5,5,29,17,47,173,479 539:1,3,3,11,3,1,109,9,69 545:1,1,1,5,17,39,23,5,343 "
    "557:1,3,1,5,25,15,31,103,499 563:1,1,1,11,11,17,63,105,183 601:1,1,5,11,9,29,97,231,363 "
    "607:1,1,5,15,19,45,41,7,383 617:1,3,7,7,31,19,83,137,221 623:1,1,1,3,23,15,111,223,83 "
    "631:1,1,5,13,31,15,55,25,161 637:1,1,3,13,25,47,39,87,257 "
)


def points(dims: int, n: int, seed: int) -> list[list[float]]:
    """The first `n` points of the `dims`-dimensional scrambled Sobol' sequence for `seed`."""
    if dims > MAX_DIMS:
        return _scipy(dims, n, seed)
    bits = _Bits(seed)
    # SciPy draws the shift first (bit j of dimension d is its 2**j), then one lower
    # triangular matrix per dimension (row p, column k; the diagonal is forced to 1).
    shift_bits = [[bits.next() for _ in range(BITS)] for _ in range(dims)]
    shift = [sum(b << j for j, b in enumerate(row)) for row in shift_bits]
    matrices = [[[bits.next() for _ in range(BITS)] for _ in range(BITS)] for _ in range(dims)]
    directions = [_scramble(_directions(d), matrices[d]) for d in range(dims)]
    scale = 1.0 / (1 << BITS)
    quasi = shift[:]
    out = [[q * scale for q in quasi]] if n > 0 else []
    for i in range(n - 1):
        bit = _lowest_zero_bit(i)  # Gray code: consecutive points differ in one direction
        quasi = [q ^ v[bit] for q, v in zip(quasi, directions)]
        out.append([q * scale for q in quasi])
    return out


def _directions(d: int) -> list[int]:
    """The direction numbers of dimension d (0-based), as BITS-bit integers."""
    if d == 0:
        v = [1] * BITS
    else:
        poly_text, _, init = _table()[d - 1].partition(":")
        poly = int(poly_text)
        m = poly.bit_length() - 1
        v = [int(x) for x in init.split(",")][:m] + [0] * (BITS - m)
        for j in range(m, BITS):  # Bratley and Fox (1988), section 2
            new = v[j - m]
            for k in range(m):
                if (poly >> (m - 1 - k)) & 1:
                    new ^= v[j - k - 1] << (k + 1)
            v[j] = new
    return [x << (BITS - 1 - j) for j, x in enumerate(v)]


def _scramble(v: list[int], matrix: list[list[int]]) -> list[int]:
    """Left-multiply each direction number (a bit vector, most significant bit first) by
    the lower triangular bit matrix, over GF(2)."""
    rows = []
    for p, row in enumerate(matrix):
        bits = row[:p] + [1] + [0] * (BITS - p - 1)
        rows.append(sum(b << (BITS - 1 - k) for k, b in enumerate(bits)))
    out = []
    for x in v:
        out.append(sum((((r & x).bit_count() & 1) << (BITS - 1 - p)) for p, r in enumerate(rows)))
    return out


def _lowest_zero_bit(i: int) -> int:
    return (~i & (i + 1)).bit_length() - 1


_TABLE: list[str] = []


def _table() -> list[str]:
    if not _TABLE:
        _TABLE.extend("".join(_DIRECTIONS).split())
    return _TABLE


def _scipy(dims: int, n: int, seed: int) -> list[list[float]]:
    import warnings

    from scipy.stats import qmc  # only for more dimensions than the table above holds

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return qmc.Sobol(d=dims, scramble=True, seed=seed).random(n).tolist()


# ---------------------------------------------------------------- NumPy's random bits

_MASK32 = (1 << 32) - 1
_MASK64 = (1 << 64) - 1
_MASK128 = (1 << 128) - 1
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645  # PCG64's 128-bit LCG multiplier


class _Bits:
    """The stream of `np.random.default_rng(seed).integers(0, 2, dtype=np.uint32)`.

    default_rng is PCG64 (XSL-RR, 128-bit state) seeded through a SeedSequence; a uint32
    is half of a 64-bit output, low half first; Lemire's method maps it onto {0, 1} as its
    top bit (for a range of two it never rejects).
    """

    def __init__(self, seed: int):
        words = _seed_sequence(seed, 8)
        w64 = [words[i] | (words[i + 1] << 32) for i in range(0, 8, 2)]
        init_state = (w64[0] << 64) | w64[1]
        init_seq = (w64[2] << 64) | w64[3]
        self.inc = ((init_seq << 1) | 1) & _MASK128
        self.state = 0
        self._step()
        self.state = (self.state + init_state) & _MASK128
        self._step()
        self.half: int | None = None

    def _step(self) -> None:
        self.state = (self.state * _PCG_MULT + self.inc) & _MASK128

    def _next64(self) -> int:
        self._step()
        s = self.state
        rot = s >> 122
        x = ((s >> 64) ^ s) & _MASK64
        return ((x >> rot) | (x << ((-rot) & 63))) & _MASK64

    def next(self) -> int:
        if self.half is not None:
            word, self.half = self.half, None
        else:
            x = self._next64()
            word, self.half = x & _MASK32, x >> 32
        return word >> 31


def _seed_sequence(seed: int, n_words: int) -> list[int]:
    """`np.random.SeedSequence(seed).generate_state(n_words)` (uint32 words), for seed >= 0."""
    if seed < 0:
        raise ValueError("the seed must not be negative")
    entropy = []
    while True:
        entropy.append(seed & _MASK32)
        seed >>= 32
        if not seed:
            break
    pool_size = 4
    hash_const = 0x43B0D7E5

    def hashmix(value: int) -> int:
        nonlocal hash_const
        value = (value ^ hash_const) & _MASK32
        hash_const = (hash_const * 0x931E8875) & _MASK32
        value = (value * hash_const) & _MASK32
        return value ^ (value >> 16)

    def mix(x: int, y: int) -> int:
        result = (0xCA01F9DD * x - 0x4973F715 * y) & _MASK32
        return result ^ (result >> 16)

    pool = [hashmix(entropy[i] if i < len(entropy) else 0) for i in range(pool_size)]
    for src in range(pool_size):
        for dst in range(pool_size):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for src in range(pool_size, len(entropy)):
        for dst in range(pool_size):
            pool[dst] = mix(pool[dst], hashmix(entropy[src]))
    hash_const = 0x8B51F9DD
    out = []
    for i in range(n_words):
        value = (pool[i % pool_size] ^ hash_const) & _MASK32
        hash_const = (hash_const * 0x58F38DED) & _MASK32
        value = (value * hash_const) & _MASK32
        out.append(value ^ (value >> 16))
    return out
