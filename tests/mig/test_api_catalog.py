"""REST: GET /api/v1/mig-profiles/ and POST /api/v1/mig-layouts/validate/."""

from __future__ import annotations

import pytest

PROFILES = "/api/v1/mig-profiles/"
VALIDATE = "/api/v1/mig-layouts/validate/"

pytestmark = pytest.mark.django_db


# -- catalog -------------------------------------------------------------------------------


def test_catalog_lists_every_product(researcher_api):
    response = researcher_api.get(PROFILES)
    assert response.status_code == 200
    body = response.json()
    assert [p["product"] for p in body] == [
        "A100-40GB",
        "A100-80GB",
        "H100-80GB",
        "H200-141GB",
        "A30-24GB",
    ]
    a100 = body[1]
    assert a100["gfd_products"] == ["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"]
    assert (a100["compute_slices"], a100["memory_slices"]) == (7, 8)
    by_name = {p["name"]: p for p in a100["profiles"]}
    assert by_name["3g.40gb"] == {
        "name": "3g.40gb",
        "resource": "nvidia.com/mig-3g.40gb",
        "compute_slices": 3,
        "memory_slices": 4,
        "max_count": 2,
        "starts": [0, 4],
        "media_extensions": False,
    }
    assert by_name["1g.10gb+me"]["resource"] == "nvidia.com/mig-1g.10gb.me"
    assert by_name["1g.10gb+me"]["media_extensions"] is True


@pytest.mark.parametrize("name", ["A30-24GB", "nvidia-a30", "NVIDIA-A30-SHARED"])
def test_catalog_filter_by_product(researcher_api, name):
    response = researcher_api.get(PROFILES, {"product": name})
    assert response.status_code == 200
    body = response.json()
    assert [p["product"] for p in body] == ["A30-24GB"]
    assert (body[0]["compute_slices"], body[0]["memory_slices"]) == (4, 4)


def test_catalog_unknown_product_is_400(researcher_api):
    response = researcher_api.get(PROFILES, {"product": "NVIDIA-L40S"})
    assert response.status_code == 400
    body = response.json()
    assert body["detail"] == "Invalid input in: product."
    assert "Unknown GPU product 'NVIDIA-L40S'" in body["product"][0]


def test_catalog_needs_authentication(anon_api):
    assert anon_api.get(PROFILES).status_code == 401


# -- validation ----------------------------------------------------------------------------


def test_validate_a_valid_layout(researcher_api):
    response = researcher_api.post(
        VALIDATE,
        {"product": "A100-80GB", "layout": {"3g.40gb": 1, "1g.10gb": 2}},
        format="json",
    )
    assert response.status_code == 200
    assert response.json() == {
        "product": "A100-80GB",
        "valid": True,
        "errors": [],
        "placements": [
            {"profile": "3g.40gb", "start": 0, "size": 4},
            {"profile": "1g.10gb", "start": 4, "size": 1},
            {"profile": "1g.10gb", "start": 5, "size": 1},
        ],
        "resources": {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1},
    }


def test_validate_accepts_a_gfd_label_and_the_single_strategy(researcher_api):
    response = researcher_api.post(
        VALIDATE,
        {"product": "NVIDIA-H100-80GB-HBM3", "layout": {"1g.10gb": 7}, "strategy": "single"},
        format="json",
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["product"], body["valid"]) == ("H100-80GB", True)
    assert body["resources"] == {"nvidia.com/gpu": 7}


def test_validate_single_strategy_refuses_a_mix(researcher_api):
    response = researcher_api.post(
        VALIDATE,
        {"product": "A100-80GB", "layout": {"3g.40gb": 1, "1g.10gb": 2}, "strategy": "single"},
        format="json",
    )
    assert response.status_code == 200
    body = response.json()
    assert body["valid"] is False
    assert "single strategy needs one profile" in body["errors"][0]


def test_validate_a_layout_that_does_not_fit(researcher_api):
    response = researcher_api.post(
        VALIDATE,
        {"product": "A100-80GB", "layout": {"4g.40gb": 1, "2g.20gb": 2}},
        format="json",
    )
    assert response.status_code == 200
    assert response.json() == {
        "product": "A100-80GB",
        "valid": False,
        "errors": [
            "1 x 4g.40gb + 2 x 2g.20gb need 8 compute slices; one A100-80GB GPU has 7.",
            "4g.40gb occupies memory slices 0-3; 2 x 2g.20gb need 2 memory slices each, "
            "starting at 0, 2 or 4 (free: 4-7): only 1 fits.",
        ],
        "placements": [],
        "resources": {},
    }


def test_validate_too_many_of_one_profile(researcher_api):
    response = researcher_api.post(
        VALIDATE, {"product": "H200-141GB", "layout": {"3g.71gb": 3}}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["errors"][0] == "at most 2 x 3g.71gb per GPU (asked for 3)."


def test_validate_unknown_profile_is_400(researcher_api):
    response = researcher_api.post(
        VALIDATE, {"product": "A30-24GB", "layout": {"3g.40gb": 1}}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {
        "detail": "Invalid input in: layout.",
        "layout": [
            "Unknown profile '3g.40gb' for A30-24GB; valid profiles: 4g.24gb, 2g.12gb, "
            "2g.12gb+me, 1g.6gb, 1g.6gb+me."
        ],
    }


def test_validate_unknown_product_is_400(researcher_api):
    response = researcher_api.post(
        VALIDATE, {"product": "NVIDIA-L4", "layout": {"1g.10gb": 1}}, format="json"
    )
    assert response.status_code == 400
    body = response.json()
    assert body["detail"] == "Invalid input in: product."
    assert "Unknown GPU product 'NVIDIA-L4'" in body["product"][0]
    assert "A100-80GB" in body["product"][0]


@pytest.mark.parametrize(
    ("payload", "field", "phrase"),
    [
        ({"layout": {"1g.10gb": 1}}, "product", "required"),
        ({"product": "A100-80GB"}, "layout", "required"),
        ({"product": "A100-80GB", "layout": ["1g.10gb"]}, "layout", "dictionary"),
        ({"product": "A100-80GB", "layout": "3g.40gb"}, "layout", "dictionary"),
        ({"product": "A100-80GB", "layout": {"1g.10gb": "2"}}, "layout", "positive integer"),
        ({"product": "A100-80GB", "layout": {"1g.10gb": 1.5}}, "layout", "positive integer"),
        ({"product": "A100-80GB", "layout": {"1g.10gb": True}}, "layout", "positive integer"),
        ({"product": "A100-80GB", "layout": {"1g.10gb": 0}}, "layout", "positive integer"),
        ({"product": "A100-80GB", "layout": {"1g.10gb": -2}}, "layout", "positive integer"),
        ({"product": "A100-80GB", "layout": {}}, "layout", "at least one instance"),
        ({"product": "", "layout": {"1g.10gb": 1}}, "product", "blank"),
        (
            {"product": "A100-80GB", "layout": {"1g.10gb": 1}, "strategy": "none"},
            "strategy",
            "not a valid choice",
        ),
    ],
)
def test_validate_malformed_input_is_400(researcher_api, payload, field, phrase):
    response = researcher_api.post(VALIDATE, payload, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["detail"] == f"Invalid input in: {field}."
    assert any(phrase in message for message in body[field]), body


def test_validate_reports_every_bad_count(researcher_api):
    response = researcher_api.post(
        VALIDATE,
        {"product": "A100-80GB", "layout": {"1g.10gb": 0, "3g.40gb": "x", "9g.9gb": 1}},
        format="json",
    )
    assert response.status_code == 400
    assert len(response.json()["layout"]) == 3


def test_validate_needs_authentication(anon_api):
    response = anon_api.post(
        VALIDATE, {"product": "A100-80GB", "layout": {"1g.10gb": 1}}, format="json"
    )
    assert response.status_code == 401
    assert "detail" in response.json()


def test_schema_has_both_paths(researcher_api):
    response = researcher_api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    assert "get" in schema["paths"]["/api/v1/mig-profiles/"]
    validate = schema["paths"]["/api/v1/mig-layouts/validate/"]["post"]
    assert "requestBody" in validate
    components = schema["components"]["schemas"]
    assert {"MigLayoutRequest", "MigLayoutValidation", "MigProduct"} <= set(components)
    assert "profiles" in components["MigProduct"]["properties"]
    assert components["MigProduct"]["properties"]["profiles"]["type"] == "array"


def test_validate_takes_json_only(researcher_api):
    """A layout is an object; a form post cannot carry one (the API reads JSON only)."""
    response = researcher_api.post(
        VALIDATE, {"product": "A100-80GB", "layout": "x"}, format="multipart"
    )
    assert response.status_code == 415
    assert "detail" in response.json()
