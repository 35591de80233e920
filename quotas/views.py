from django.contrib.auth.decorators import login_required
from django.http import HttpResponse


@login_required
def request_detail(request, pk):
    return HttpResponse(str(pk))
