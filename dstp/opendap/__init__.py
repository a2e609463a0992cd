"""OPeNDAP: a dstp dataset as DAP2 and DAP4 see it, their constraint expressions and their encodings.

Nothing here knows the web framework or reads files. :mod:`.model` turns a
dataset's description (``service.describe``) into DAP variables — one virtual
file per dataset, however many files it aggregates, with decoded values and
the CF attributes that describe them; :mod:`.constraint` reads DAP2 and DAP4
constraint expressions into index hyperslabs; :mod:`.dap2` writes the DAS,
DDS and the XDR ``.dods`` body, :mod:`.dap4` the DMR and the chunked ``.dap``
body with CRC32 checksums. The HTTP door (:mod:`dstp.http.opendap_routes`)
reads each hyperslab through the service and hands the arrays here.
"""

from dstp.opendap.constraint import Projection, parse_dap2, parse_dap4
from dstp.opendap.model import DapDataset, DapVariable, build_dataset

__all__ = ["DapDataset", "DapVariable", "Projection", "build_dataset", "parse_dap2", "parse_dap4"]
