"""The pack registry over HTTP (seed 001 §5.3, §6-7): list and publish a tenant's packs, export
its registry as an offline seed, import a verified one into the caller's tenant.

Every route acts on the caller's tenant only (the tenant comes from the credential, never from
the body) and reads or changes the whole registry, so a token limited to definitions is refused
(``WholeTenant``). Publishing, export and import are an admin's, as applying definitions is; the
import goes through the same apply, and arrives unapproved (``packs.registry``).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from jobgate.api import errors
from jobgate.api.access import ADMIN, READ, WholeTenant, allow
from jobgate.api.errors import BadRequest
from jobgate.api.responses import repeated
from jobgate.api.server_state import ServerState, server_state
from jobgate.core.errors import UnavailableError, ValidationError
from jobgate.core.packs import PackRecord, parse_ref
from jobgate.definitions.schema import LoadedDefinition, names_raw_handler
from jobgate.packs import archive, registry
from jobgate.service.tokens import Principal
from jobgate.views.schemas import Request as RequestBody

router = APIRouter(prefix="/api/v1", tags=["packs"])

State = Annotated[ServerState, Depends(server_state)]
ZIP = "application/zip"


class PackOut(BaseModel):
    pack: str  # <pack_id>@<version>
    digest: str
    origin: str  # publish | import
    created_at: datetime
    created_by: str
    definitions: list[dict[str, str]]  # job_definition_id, digest, blob
    approvals: list[dict[str, str]]  # carried approvals (of the exporting deployment)

    @classmethod
    def of(cls, r: PackRecord) -> PackOut:
        return cls(
            pack=r.ref.key,
            digest=r.digest,
            origin=r.origin,
            created_at=r.created_at,
            created_by=r.created_by,
            definitions=r.manifest["definitions"],
            approvals=r.manifest["approvals"],
        )


class PublishIn(RequestBody):
    pack: str = Field(max_length=200, description="<pack_id>@<version>")
    definitions: list[Annotated[str, Field(max_length=200)]] = Field(
        max_length=500, description="job definition ids; their current versions are packed"
    )


class PublishOut(BaseModel):
    pack: PackOut
    created: bool


class ImportOut(BaseModel):
    signed_by: str
    packs: list[PublishOut]
    definitions: list[dict[str, Any]]
    approved: list[str]
    skipped: list[dict[str, str]] = Field(
        default_factory=list,
        description="definitions left as they are here (suspended or retired here), each with why",
    )
    notes: list[str] = Field(default_factory=list, description="what to know of what was applied")


@router.get("/packs", response_model=list[PackOut])
@allow(READ)
def list_packs(caller: WholeTenant, state: State) -> list[PackOut]:
    """The caller's tenant's packs; another tenant's are never listed."""
    return [PackOut.of(r) for r in registry.list_packs(state.engine, caller.tenant_id)]


@router.post("/packs", response_model=PublishOut, status_code=201, responses=repeated(PublishOut))
@allow(ADMIN)
def publish_pack(body: PublishIn, caller: WholeTenant, state: State, response: Response) -> PublishOut:
    """Pack the current versions of ``definitions`` as ``pack``: 201 stored, 200 the same content
    was stored already, 409 ``pack_identity_digest_conflict`` when it holds other content."""
    ref = parse_ref(body.pack, "pack")
    done = registry.publish(state.engine, caller.tenant_id, ref, body.definitions, actor=caller.actor)
    if not done.created:
        response.status_code = 200
    return PublishOut(pack=PackOut.of(done.record), created=done.created)


@router.post("/export/offline-seed", response_class=Response, responses={200: {"content": {ZIP: {}}}})
@allow(ADMIN)
def export_offline_seed(caller: WholeTenant, state: State) -> Response:
    """The caller's tenant's registry as one signed ZIP (``catalog-manifest.json`` and its DSSE
    envelope when the deployment has an evidence key), from one snapshot."""
    data = registry.export_seed(state.engine, caller.tenant_id, actor=caller.actor)
    return Response(
        data,
        media_type=ZIP,
        headers={
            "Content-Disposition": 'attachment; filename="offline-seed.zip"',
            "X-Archive-SHA256": hashlib.sha256(data).hexdigest(),
        },
    )


def _api_admission(caller: Principal) -> Any:
    """What the API refuses in an archive that ``jobgate import`` on the server would accept:
    a raw handler (code to import is the operator's choice, made on the server, as for
    ``POST /api/v1/definitions``)."""

    def admit(loaded: LoadedDefinition) -> None:
        if names_raw_handler(loaded.definition.content):  # the rule of POST /api/v1/definitions
            raise ValidationError(
                f"{loaded.source}: a definition with a raw handler is imported by the operator (jobgate import)",
                field="handler",
            )

    return admit


IMPORT_PATH = "/api/v1/import/offline-seed"


@router.post(
    IMPORT_PATH.removeprefix("/api/v1"),
    response_model=ImportOut,
    responses={409: {"description": "pack_identity_digest_conflict"}, 503: {"description": "no trust root"}},
    openapi_extra={  # read as raw bytes by the handler, so declared here for the document
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
@allow(ADMIN)
async def import_offline_seed(request: Request, caller: WholeTenant, state: State) -> Any:
    """Import a VERIFIED offline seed (the request body, a ZIP) into the caller's tenant: 200 with
    what was applied; 422 ``offline_seed_refused`` naming every problem (audited, nothing else
    written); 409 on a pack identity stored with other content; 503 with no trust root."""
    data = await request.body()
    if len(data) > archive.MAX_ARCHIVE_BYTES:
        raise BadRequest(f"the archive is larger than {archive.MAX_ARCHIVE_BYTES} bytes", field="body")
    try:
        done = await run_in_threadpool(
            registry.import_seed,
            state.engine,
            caller.tenant_id,
            data,
            actor=caller.actor,
            lineage=caller.minted_by,
            admit=_api_admission(caller),
        )
    except UnavailableError as exc:
        return JSONResponse(status_code=503, content=errors.body("offline_seed_untrusted", exc.message, exc.field))
    return ImportOut(
        signed_by=done.signed_by,
        packs=[PublishOut(pack=PackOut.of(p.record), created=p.created) for p in done.packs],
        definitions=done.definitions,
        approved=done.approved,
        skipped=done.skipped,
        notes=done.notes,
    )
