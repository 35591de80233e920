"""A team with a requester, a manager and another member; another team; two admins; one
quota request and one MIG request of the team (real Postgres rows, no cluster needed)."""

from __future__ import annotations

import pytest

from mig.models import MigRequest
from quotas import services
from quotas.models import TeamNamespace
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_team, make_user

GPU = "nvidia.com/gpu"
WHY = "Training the vision model for the spring paper."


@pytest.fixture
def world(db, on_commit):
    cluster = make_cluster("gpu-a")
    make_node(cluster, "n1", gpus=8)
    requester, manager, member = make_user("rob"), make_user("maria"), make_user("mo")
    outsider = make_user("olga")
    admin, admin2 = make_user("root", staff=True), make_user("root2", staff=True)
    vision = make_team("vision", members=[requester, member], managers=[manager])
    nlp = make_team("nlp", members=[outsider])
    ns = TeamNamespace.objects.create(team=vision, cluster=cluster, name="ml-vision")
    with on_commit(execute=False):  # the new-request e-mail to admins is not under test
        req = services.submit(
            requester,
            services.RequestData(team=vision, namespace=ns, resource=GPU, amount=2,
                                 justification=WHY),
        )  # fmt: skip
    mig = MigRequest.objects.create(
        team=vision, namespace=ns, cluster=cluster, product="A100-80GB",
        layout={"3g.40gb": 2}, gpus=1, justification="Inference servers need isolation.",
        requested_by=requester,
    )  # fmt: skip
    return {
        "cluster": cluster, "ns": ns, "vision": vision, "nlp": nlp, "requester": requester,
        "manager": manager, "member": member, "outsider": outsider, "admin": admin,
        "admin2": admin2, "req": req, "mig": mig,
    }  # fmt: skip
