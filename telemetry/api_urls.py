"""REST routes (filled in by the owner of this module)."""

urlpatterns: list = []
