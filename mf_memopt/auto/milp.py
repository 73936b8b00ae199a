"""Mixed-integer linear programmes for the planner: built a row at a time, solved by HiGHS (SciPy), checked.

Both searches that use one (the per-stage search, `solver.py`, and the pipeline layout, `balance.py`) state all
their memory rows in one unit (KiB in the per-stage search, MiB in the layout's programme: bytes over a power of
two, exact in binary floating point), layers in layers and time in one unit per programme. HiGHS works in floating
point with tolerances, so a programme whose coefficients span many orders of magnitude gets answers that are wrong,
not merely imprecise (a feasible programme called infeasible, a plan slower than one it could have found), and at
HiGHS's default tolerances (1e-7 on rows, 1e-6 on integrality, after its own scaling) an integer plan passed a
90 MB cap on kept bytes by 4 bytes. So:

* HiGHS runs at tightened tolerances (`_HIGHS`, 1e-9), where no plan of the tests' random stages passed a cap.
  Whatever HiGHS prints itself is kept off standard output (where `--json` goes).
* `span`: the largest coefficient magnitude of the matrix over the smallest. `solve` refuses a programme whose span
  is over `MAX_SPAN` (a defect of the caller, raised as `SolverError`).
* After every solve the integer variables are rounded and every row and bound is evaluated again, in exact rational
  arithmetic wherever floating point cannot decide. A row missed by more than `TOLERANCE` of the magnitudes it adds
  up (or of 1) is a numerical failure, raised as `SolverError`. What a caller decides by (a stage's peak in bytes) it
  checks again in integers against the estimator's own functions.
* A HiGHS status other than "optimal" or "infeasible" (a time limit, a numerical failure) is a fact for the caller
  to report, never "nothing fits": without a solution it raises `SolverError`; with one, the solution comes back
  with `optimal` False.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import warnings
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

KIB = 1 << 10
MIB = 1 << 20
MAX_SPAN = 1e9          # largest / smallest coefficient magnitude of a programme's matrix
TIME_LIMIT_S = 30.0     # per solve; the planner's programmes solve in milliseconds to a second
TOLERANCE = 1e-7        # a row may miss by this share of the magnitudes it adds up, or of 1 (HiGHS's own: 1e-10,
                        # after its scaling)


# HiGHS's tolerances tightened: its defaults (1e-7 on rows, 1e-6 on integrality, after its own scaling) let an integer
# plan's kept bytes pass a cap of 90 MB by 4 bytes; at 1e-10 its presolve printed repairs on the layout programme
_HIGHS = {"primal_feasibility_tolerance": 1e-9, "mip_feasibility_tolerance": 1e-9, "mip_abs_gap": 1e-10,
          "output_flag": False}


class SolverError(RuntimeError):
    """HiGHS gave no usable answer (a limit, a numerical failure) or its answer breaks a row: not "nothing fits"."""


@dataclass(frozen=True, slots=True)
class Linear:
    """A linear expression: coefficients by variable, and a constant."""

    terms: dict[int, float]
    constant: float = 0.0

    def scaled(self, factor: float) -> Linear:
        return Linear({var: value * factor for var, value in self.terms.items()}, self.constant * factor)


@dataclass(frozen=True, slots=True)
class Solved:
    """A solution: every variable's value (integers rounded), the objective's value, and whether HiGHS proved it
    optimal (False: a time limit stopped it with this solution)."""

    x: tuple[float, ...]
    objective: float
    optimal: bool

    def __getitem__(self, var: int) -> float:
        return self.x[var]

    def value(self, expression: Linear | dict[int, float]) -> float:
        if isinstance(expression, dict):
            expression = Linear(expression)
        return expression.constant + sum(value * self.x[var] for var, value in expression.terms.items())


@dataclass(slots=True)
class Program:
    """lower <= row <= upper for every row, variables within their bounds, some integer; minimise `objective`."""

    name: str = "programme"
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    integer: list[int] = field(default_factory=list)
    rows: list[tuple[dict[int, float], float, float, str]] = field(default_factory=list)
    objective: dict[int, float] = field(default_factory=dict)
    empty_rows_hold: bool = True        # a row with no variable whose constant misses its bounds: no solution

    def var(self, lower: float, upper: float, *, integer: bool = False) -> int:
        self.lower.append(float(lower))
        self.upper.append(float(upper))
        self.integer.append(1 if integer else 0)
        return len(self.lower) - 1

    def row(self, expression: Linear | dict[int, float], lower: float, upper: float, label: str = "") -> None:
        """lower <= expression <= upper (the expression's constant moves to the bounds)."""
        if isinstance(expression, dict):
            expression = Linear(expression)
        terms = {var: value for var, value in expression.terms.items() if value}
        low, high = lower - expression.constant, upper - expression.constant
        if not terms:
            self.empty_rows_hold = self.empty_rows_hold and low <= 0 <= high
            return
        self.rows.append((terms, low, high, label))

    def span(self) -> float:
        """The largest coefficient magnitude of the matrix over the smallest (1 for an empty matrix)."""
        magnitudes = [abs(value) for terms, _, _, _ in self.rows for value in terms.values()]
        return max(magnitudes) / min(magnitudes) if magnitudes else 1.0

    def solve(self, time_limit: float = TIME_LIMIT_S) -> Solved | None:
        """The optimum, or None when the programme has no solution. Raises `SolverError` (see the module)."""
        if not self.empty_rows_hold or any(low > high for low, high in zip(self.lower, self.upper)):
            return None
        if self.span() > MAX_SPAN:
            raise SolverError(f"the {self.name} is badly scaled (its coefficients span {self.span():.1e}): "
                              "a defect of mf_memopt, please report it")
        size = len(self.lower)
        cost = np.zeros(size)
        for var, value in self.objective.items():
            cost[var] = value
        constraints = []
        if self.rows:
            rows, cols, data = [], [], []
            for index, (terms, _, _, _) in enumerate(self.rows):
                for var, value in terms.items():
                    rows.append(index)
                    cols.append(var)
                    data.append(value)
            matrix = coo_matrix((data, (rows, cols)), shape=(len(self.rows), size)).tocsr()
            constraints = [LinearConstraint(matrix, [row[1] for row in self.rows], [row[2] for row in self.rows])]
        with warnings.catch_warnings(), _quiet():   # SciPy warns that it passes HiGHS's own options on verbatim
            warnings.simplefilter("ignore", RuntimeWarning)
            result = milp(cost, integrality=np.array(self.integer), bounds=Bounds(self.lower, self.upper),
                          constraints=constraints, options={"time_limit": time_limit, "mip_rel_gap": 0.0, **_HIGHS})
        if result.status == 2:                                  # infeasible
            return None
        if result.x is None:
            raise SolverError(f"HiGHS found no answer to the {self.name}: {result.message} (status "
                              f"{result.status})")
        x = tuple(float(round(value)) if integer else float(value) for value, integer in zip(result.x, self.integer))
        self._check(x)
        objective = sum(value * x[var] for var, value in self.objective.items())
        return Solved(x=x, objective=objective, optimal=result.status == 0)

    def _check(self, x: tuple[float, ...]) -> None:
        """Every row and bound at `x` (see the module); raises `SolverError`. A row is summed in floating point first
        (its error is below 1e-12 of its magnitude) and again in exact rational arithmetic when it comes within
        that much of its tolerance."""
        for var, value in enumerate(x):
            if not _clearly_holds(value, self.lower[var], self.upper[var], abs(value)) and \
                    not _holds(Fraction(value), self.lower[var], self.upper[var], abs(Fraction(value))):
                raise SolverError(f"HiGHS's answer to the {self.name} puts a variable outside its bounds")
        for terms, low, high, label in self.rows:
            products = [value * x[var] for var, value in terms.items()]
            magnitude = math.fsum(abs(item) for item in products)
            if _clearly_holds(math.fsum(products), low, high, magnitude):
                continue
            exact = [Fraction(value) * Fraction(x[var]) for var, value in terms.items()]
            if not _holds(sum(exact), low, high, sum(abs(item) for item in exact)):
                raise SolverError(f"HiGHS's answer to the {self.name} breaks its row '{label or 'unnamed'}' beyond "
                                  "its tolerance: a numerical failure")


@contextlib.contextmanager
def _quiet():
    """Standard output closed at the file-descriptor level: HiGHS prints some repairs with C's printf."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _slack(magnitude: float, low: float, high: float) -> float:
    bounds = [abs(bound) for bound in (low, high) if math.isfinite(bound)]
    return TOLERANCE * max(1.0, magnitude + max(bounds, default=0.0))


def _clearly_holds(value: float, low: float, high: float, magnitude: float) -> bool:
    margin = _slack(magnitude, low, high) - 1e-12 * max(1.0, magnitude)
    return (not math.isfinite(low) or value >= low - margin) and (not math.isfinite(high) or value <= high + margin)


def _holds(value: Fraction, low: float, high: float, magnitude: Fraction) -> bool:
    bounds = [abs(Fraction(bound)) for bound in (low, high) if math.isfinite(bound)]
    slack = TOLERANCE * max(1, magnitude + max(bounds, default=0))
    return ((not math.isfinite(low) or value >= Fraction(low) - slack)
            and (not math.isfinite(high) or value <= Fraction(high) + slack))
