"""The report's figures and importances of a sweep far larger than a test can run: the committed
jsb_paper example's search trials repeated to 10,000 (each copy's best valid loss and learning
rate moved by 1% at random, so that no two are equal). Past their bounds, the swarm becomes a
strip, parallel coordinates draw a random sample and importance fits one, and each says so."""

import math

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT

TRIALS = ROOT / "results" / "examples" / "jsb_paper" / "trials.parquet"
CHOSEN = pd.Series({"sweep": "jsb-paper", "study": "jsb_optimization", "preset": "paper"})


def search_trials() -> pd.DataFrame:
    from rhnsearch.tracking.store import search_trials

    return search_trials(pd.read_parquet(TRIALS)).reset_index(drop=True)


def repeated(trials: pd.DataFrame, n: int) -> pd.DataFrame:
    out = pd.concat([trials] * math.ceil(n / len(trials)), ignore_index=True).iloc[:n].copy()
    rng = np.random.default_rng(0)
    for column in ("metrics.best_valid_loss", "params.lr"):
        out[column] = out[column] * np.exp(rng.normal(0, 0.01, len(out)))
    out["trial_id"] = [f"t{i}" for i in range(len(out))]
    return out


@pytest.fixture(scope="module")
def trials() -> dict[int, pd.DataFrame]:
    committed = search_trials()
    return {len(committed): committed, 10_000: repeated(committed, 10_000)}


def title(fig) -> str:
    return " ".join(fig.axes[0].get_title().split())


def test_a_swarm_of_more_settings_than_it_can_lay_out_is_a_strip_of_every_one(trials):
    from rhnsearch.results import plots

    for n, frame in trials.items():
        fig = plots.swarm(CHOSEN, frame)
        ax = fig.axes[0]
        shown = np.concatenate([c.get_offsets() for c in ax.collections if c.get_gid() == "shown"])
        ok = frame["status"].isin(("completed", "stopped"))
        assert sorted(shown[:, 1]) == pytest.approx(sorted(frame["metrics.best_valid_loss"][ok]))
        largest = frame[ok].groupby(["params.arch", "params.depth"]).size().max()
        if largest > plots.SWARM_MAX:
            assert n == 10_000 and f"a jittered strip: up to {largest} settings a cell" in title(
                fig
            )
        else:
            assert n < 10_000 and "strip" not in title(fig)


def test_parallel_coordinates_of_many_trials_draw_a_sample_and_say_so(trials):
    from rhnsearch.results import plots

    for n, frame in trials.items():
        fig = plots.parallel(CHOSEN, frame)
        lines = sum(len(c.get_segments()) for c in fig.axes[0].collections if c.get_gid())
        failed = frame["status"].eq("failed").sum()
        if n > plots.PARALLEL_MAX:
            sample = frame.sample(plots.PARALLEL_MAX, random_state=0)
            assert lines == plots.PARALLEL_MAX - sample["status"].eq("failed").sum()
            assert f"{plots.PARALLEL_MAX:,} of the 10,000 trials drawn at random" in title(fig)
        else:
            assert lines == n - failed and "drawn at random" not in title(fig)


def test_importance_of_more_trials_than_it_fits_is_that_of_a_random_sample(trials):
    from rhnsearch.results import importance
    from rhnsearch.results.tables import finished

    committed = trials[min(trials)]
    frame, skipped = importance.importances(committed, max_trials=50)
    assert not skipped
    usable = committed[finished(committed, "best_valid_loss")]
    for arch, mine in frame.groupby("arch"):
        theirs = usable[usable["params.arch"] == arch]
        assert set(mine["trials"]) == {50} and set(mine["finished"]) == {len(theirs)}
        assert importance.fitted_on(mine.iloc[0]) == f"50 of {len(theirs)} trials, drawn at random"
    # one architecture's fits (each is seconds): its sample alone fits to the same importances
    arch, mine = next(iter(frame.groupby("arch")))
    theirs = usable[usable["params.arch"] == arch]
    alone, _ = importance.importances(
        theirs.sample(50, random_state=importance.SAMPLE_SEED), max_trials=50
    )
    assert alone["importance"].tolist() == pytest.approx(mine["importance"].tolist())
    assert set(alone["finished"]) == {50}
    whole, _ = importance.importances(theirs.head(60))  # the default bound: 60 are below it
    assert (whole["trials"] == whole["finished"]).all()
    assert importance.fitted_on(whole.iloc[0]) == f"{whole['trials'].iloc[0]} trials"


def test_a_crowded_swarm_is_saved_without_seaborns_warning(tmp_path):
    """A swarm of 100 settings a cell (under SWARM_MAX) puts some on its edge, and seaborn warns so
    as the figure is drawn (here: fig.savefig); saved the report's and `results plot`'s way,
    nothing is said on the user's terminal."""
    import warnings

    from rhnsearch.results import plots

    crowded = repeated(search_trials(), 1_200)  # 100 settings a cell
    fig = plots.swarm(CHOSEN, crowded)
    with warnings.catch_warnings(record=True) as drawn:
        warnings.simplefilter("always")
        fig.savefig(tmp_path / "plain.png")
    assert any("cannot be placed" in str(w.message) for w in drawn)
    with warnings.catch_warnings(record=True) as saved:
        warnings.simplefilter("always")
        plots.save(fig, tmp_path / "swarm.png")
    assert saved == [] and (tmp_path / "swarm.png").stat().st_size > 0
