"""Checks of tools/validate-planner's statistics, on made-up plans and runs.

    python3 validate_planner_test.py TOOLS_PLANNER_DIR

The validation's figures (which plans it runs, which steps it keeps, the
error, Spearman's correlation, the first choice) decide whether the planner
meets its targets, so each is checked here against its definition: the
rank correlation against the textbook formula on random values without
ties and against known cases with them, the choice of plans as a property
over random predicted times.
"""
import itertools
import random
import sys
import unittest

sys.path.insert(0, sys.argv.pop(1))
import validate  # noqa: E402  (tools/planner/validate.py)


def plans_of(seconds):
    return [{"seconds": {"step": s}, "id": i} for i, s in enumerate(sorted(seconds))]


class Spearman(unittest.TestCase):
    def test_without_ties_equals_the_formula(self):
        rng = random.Random(7)
        for n in range(2, 9):
            for _ in range(50):
                x, y = rng.sample(range(100), n), rng.sample(range(100), n)
                rx, ry = validate.ranks_of(x), validate.ranks_of(y)
                d2 = sum((a - b) ** 2 for a, b in zip(rx, ry))
                self.assertAlmostEqual(validate.spearman(x, y), 1 - 6 * d2 / (n * (n * n - 1)))

    def test_ties_take_their_mean_rank(self):
        self.assertEqual(validate.ranks_of([3.0, 1.0, 3.0, 2.0]), [3.5, 1.0, 3.5, 2.0])
        self.assertAlmostEqual(validate.spearman([1, 2, 3, 4], [1, 1, 2, 2]), 0.8944271909999159)

    def test_order_alone_counts(self):
        self.assertAlmostEqual(validate.spearman([1, 2, 3], [10, 200, 3000]), 1.0)
        self.assertAlmostEqual(validate.spearman([1, 2, 3], [5, 4, 0.1]), -1.0)


class Chosen(unittest.TestCase):
    def test_every_plan_when_few(self):
        plans = plans_of([3, 1, 2])
        self.assertEqual(validate.chosen(plans, 5), plans)

    def test_top_third_and_a_spread_over_predicted_times(self):
        rng = random.Random(11)
        for count, n in itertools.product((2, 4, 6, 8, 12), (13, 20, 40)):
            plans = plans_of([rng.uniform(0.05, 0.25) for _ in range(n)])
            picked = validate.chosen(list(plans), count)
            self.assertEqual(len(picked), count)
            self.assertEqual(len({p["id"] for p in picked}), count, "no plan twice")
            times = [p["seconds"]["step"] for p in picked]
            self.assertEqual(times, sorted(times), "fastest predicted first")
            top = max(count // 3, 1)
            self.assertEqual(picked[:top], plans[:top], "the planner's top plans")
            # Each spread target's plan is the nearest to it among those not yet taken.
            low, high = plans[top - 1]["seconds"]["step"], plans[-1]["seconds"]["step"]
            taken = {p["id"] for p in plans[:top]}
            for i in range(1, count - top + 1):
                target = low + i * (high - low) / (count - top)
                free = [p for p in plans if p["id"] not in taken]
                nearest = min(abs(p["seconds"]["step"] - target) for p in free)
                pick = next(p for p in picked if p["id"] not in taken
                            and abs(p["seconds"]["step"] - target) == nearest)
                taken.add(pick["id"])
            self.assertEqual(taken, {p["id"] for p in picked})
            self.assertIn(plans[-1]["id"], taken, "the slowest plan is the last target")


class Comparable(unittest.TestCase):
    def test_steps_within_the_band_of_the_calibration_pace(self):
        steps = [(1.0, 100.0), (2.0, 100.0 * validate.QUIET), (3.0, 100.0 / validate.QUIET), (4.0, 131.0),
                 (5.0, 76.0)]
        self.assertEqual(validate.comparable(steps, 100.0), [1.0, 2.0, 3.0])


class Summary(unittest.TestCase):
    def row(self, predicted, measured, error=None):
        return {"predicted": predicted, "measured": measured, "memory_equal": True,
                "error": error if error is not None or measured is None else predicted / measured - 1}

    def test_figures_over_the_timed_plans(self):
        rows = [self.row(1.0, 1.1), self.row(2.0, None), self.row(3.0, 2.5), self.row(4.0, 5.0, error=-0.1)]
        s = validate.summary(rows)
        self.assertEqual((s["runs"], s["timed"], s["memory_equal"]), (4, 3, 4))
        self.assertAlmostEqual(s["mape"], (0.1 / 1.1 + 0.5 / 2.5 + 0.1) / 3)
        self.assertAlmostEqual(s["spearman"], 1.0)
        self.assertAlmostEqual(s["first_over_fastest"], 1.0)

    def test_first_choice_against_the_fastest_measured(self):
        s = validate.summary([self.row(1.0, 1.2), self.row(2.0, 1.0)])
        self.assertAlmostEqual(s["first_over_fastest"], 1.2)
        self.assertAlmostEqual(s["spearman"], -1.0)

    def test_no_figures_from_fewer_than_two_timed(self):
        s = validate.summary([self.row(1.0, 1.0), self.row(2.0, None)])
        self.assertIsNone(s["mape"])
        self.assertIsNone(s["spearman"])


if __name__ == "__main__":
    unittest.main()
