// Ids as the gateway shows them. No DOM here: tests run it under Node.

// An id's short form, as the gateway's log lines show it (fleetid_short in
// protocol/fleetid.c has the same rule): its first 8 characters; for an id
// that names its host (--host-id), whose first 12 hex digits are the host's
// tag and so the same for all of that host's kernels, its last 8.
export function shortId (id) {
  const tag = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(id)
    ? id.slice(0, 8) + id.slice(9, 13)
    : /^gb[0-9a-f]{28}$/.test(id) ? id.slice(2, 14) : null;
  return tag !== null && hostOfTag(tag) !== null ? id.slice(-8) : id.slice(0, 8);
}

// The host id a tag names: its bytes as ASCII up to the zeros that pad it,
// of [a-z0-9]; null when it names none.
function hostOfTag (tag) {
  let host = '';
  for (let i = 0; i < tag.length; i += 2) {
    const c = parseInt(tag.slice(i, i + 2), 16);
    if (c === 0) {
      if (!/^0*$/.test(tag.slice(i))) return null;
      break;
    }
    host += String.fromCharCode(c);
  }
  return /^[a-z0-9]{1,6}$/.test(host) ? host : null;
}
