// Package headers holds the pure header logic of queue: which inbound request
// headers pass to the upstream, and the values of the forwarding headers that
// queue adds (Forwarded per RFC 7239, X-Forwarded-For/-Proto/-Host).
//
// The package decides; it does not do I/O. An [Outbound] is computed once per
// request from the inbound header and the current hop; callers either apply it
// to an [net/http.Header] ([Outbound.Apply], used for the HTTP/2 upstream) or
// ask it header by header while serialising a request ([Outbound.Forward] and
// the Append methods, used by the HTTP/1.1 upstream client, which writes the
// rewritten head straight into its connection buffer without building a map).
//
// One table of field names holds the hop-by-hop fields and the other fields
// that do not pass as they came, for both directions and both protocols:
// [Outbound.Forward] (requests), [IsHopByHop] (responses) and
// [ForbiddenInTrailer] (trailers, which forbid framing and routing fields
// besides the hop-by-hop ones) all read it.
//
// It deliberately does not parse Forwarded lists it keeps: a trusted peer's
// list is forwarded as it came, and an untrusted peer's is dropped whole.
//
// Everything here is safe for concurrent use; an Outbound belongs to the
// request that made it and must not outlive it.
package headers
