"""A sibling rank whose node exporter died longer ago than the re-read reaches back: its work is unknown."""
import pytest

from tests.test_recheck_stale_metrics import _approve_rank1_stop


@pytest.mark.parametrize("answer_at_min", [200, 260, 320, 350])
def test_an_approved_stop_of_a_rank_whose_sibling_went_dark_long_ago_is_refused(answer_at_min):
    deps, cluster, outcomes = _approve_rank1_stop(dark_from_min=186, answer_at_min=answer_at_min)
    assert not [s for s in cluster.stops if s.job.startswith("ml/ddp-")], outcomes
