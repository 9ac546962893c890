// One DNS message in, one out: decode the query (dns-packet), answer it from the cluster zone or
// hand it to the forwarder, encode the reply, and truncate it for UDP.
//
// Contract:
// - Never throws. A message too short for a header is dropped (null); one that does not decode
//   gets FORMERR; a response, or several questions, FORMERR; an opcode other than QUERY, NOTIMP.
// - Names in the cluster zone are answered authoritatively (AA): records, NODATA (NOERROR with no
//   answer) or NXDOMAIN, both with the zone's SOA in the authority section (RFC 2308 — the SOA's
//   minimum is how long resolvers may cache the negative answer).
// - Names outside it go to the upstream when one is configured (the reply relayed as is;
//   SERVFAIL when it does not answer). Without one they get REFUSED: this server is
//   authoritative for the cluster zone only and offers no recursion (RA clear), and REFUSED is
//   what RFC 1035 gives a server declining a query by policy — a resolver moves on to its next
//   nameserver at once. SERVFAIL would claim a failure of a zone we serve; caching resolvers
//   remember it and retry. CoreDNS answers REFUSED too for a zone no server block serves.
// - UDP replies longer than 512 bytes (or the EDNS payload size the query advertises, capped at
//   1232 as DNS Flag Day 2020 advises) are sent without records and with TC set, so the client
//   asks again over TCP (RFC 1035 4.2.1, RFC 2181 9: no partial RRsets).
import dnsPacket, { type Answer, type DecodedPacket, type Packet } from 'dns-packet';
import { type Lookup, lookup, type Zone } from './zone.ts';

export type Transport = 'udp' | 'tcp';
/** Sends a raw query to the upstream and resolves with its raw reply, or rejects. */
export type Forwarder = (query: Buffer, transport: Transport) => Promise<Buffer>;

export const RCODE = {
  NOERROR: 0,
  FORMERR: 1,
  SERVFAIL: 2,
  NXDOMAIN: 3,
  NOTIMP: 4,
  REFUSED: 5,
} as const;
/** RFC 1035 2.3.4: the largest UDP message a client without EDNS accepts. */
export const UDP_LIMIT = 512;
const EDNS_LIMIT = 1232;
const HEADER_BYTES = 12;
const OPCODE_SHIFT = 11;

const OUTSIDE: Lookup = { status: 'outside', answers: [], additionals: [] };

export interface Reply {
  bytes: Buffer;
  /** For the query log: the question and the rcode sent. */
  qname: string;
  qtype: string;
  rcode: number;
}

export async function respond(
  zone: Zone,
  query: Buffer,
  transport: Transport,
  forward?: Forwarder,
): Promise<Reply | null> {
  if (query.length < HEADER_BYTES) return null;
  let q: DecodedPacket;
  try {
    q = dnsPacket.decode(query);
  } catch {
    return headerOnly(query, RCODE.FORMERR);
  }
  const opcode = (query.readUInt16BE(2) >> OPCODE_SHIFT) & 0xf;
  if (opcode !== 0) return headerOnly(query, RCODE.NOTIMP);
  const question = q.questions?.[0];
  if (q.type === 'response' || q.questions?.length !== 1 || !question)
    return headerOnly(query, RCODE.FORMERR);
  // The cluster zone is class IN; CHAOS and the rest (`version.bind`) are not ours to answer.
  const inClass = question.class === undefined || question.class === 'IN';
  const found = inClass ? lookup(zone, question.name, question.type) : OUTSIDE;
  if (found.status === 'outside') return outside(q, query, transport, forward);
  const rcode = found.status === 'nxdomain' ? RCODE.NXDOMAIN : RCODE.NOERROR;
  const flags = dnsPacket.AUTHORITATIVE_ANSWER | ((q.flags ?? 0) & dnsPacket.RECURSION_DESIRED);
  const reply = message(
    q,
    flags | (forward ? dnsPacket.RECURSION_AVAILABLE : 0) | rcode,
    found,
    zone,
  );
  return { bytes: fitUdp(reply, q, transport), qname: question.name, qtype: question.type, rcode };
}

function message(q: DecodedPacket, flags: number, found: Lookup, zone: Zone): Packet {
  const asked = q.questions![0]!;
  const lower = asked.name.replace(/\.$/, '').toLowerCase();
  // Answer with the owner name spelled as asked (RFC 4343: case is preserved where possible).
  const answers = found.answers.map((r) => (r.name === lower ? { ...r, name: asked.name } : r));
  const authorities = found.status === 'answer' ? [] : [zone.soa];
  return {
    type: 'response',
    id: q.id,
    flags,
    questions: [asked],
    answers,
    authorities,
    additionals: [...found.additionals, ...ednsReply(q)],
  };
}

async function outside(
  q: DecodedPacket,
  query: Buffer,
  transport: Transport,
  forward?: Forwarder,
): Promise<Reply> {
  const { name: qname, type: qtype } = q.questions![0]!;
  if (!forward) return { ...headerAndQuestion(q, RCODE.REFUSED), qname, qtype };
  try {
    const bytes = await forward(query, transport);
    return { bytes, qname, qtype, rcode: bytes.length >= 4 ? bytes.readUInt16BE(2) & 0xf : -1 };
  } catch {
    return { ...headerAndQuestion(q, RCODE.SERVFAIL, dnsPacket.RECURSION_AVAILABLE), qname, qtype };
  }
}

function headerAndQuestion(
  q: DecodedPacket,
  rcode: number,
  extra = 0,
): { bytes: Buffer; rcode: number } {
  const flags = ((q.flags ?? 0) & dnsPacket.RECURSION_DESIRED) | extra | rcode;
  const bytes = dnsPacket.encode({
    type: 'response',
    id: q.id,
    flags,
    questions: q.questions,
    additionals: ednsReply(q),
  });
  return { bytes, rcode };
}

/** A reply to a message we could not read: its id and opcode, QR set, the rcode, no sections. */
function headerOnly(query: Buffer, rcode: number): Reply {
  const bytes = Buffer.alloc(HEADER_BYTES);
  bytes.writeUInt16BE(query.readUInt16BE(0), 0);
  bytes.writeUInt16BE(0x8000 | (query.readUInt16BE(2) & 0x7900) | rcode, 2);
  return { bytes, qname: '', qtype: '', rcode };
}

function ednsOf(q: DecodedPacket): (Answer & { type: 'OPT' }) | undefined {
  return q.additionals?.find((r): r is Answer & { type: 'OPT' } => r.type === 'OPT');
}

/** RFC 6891 7: a reply to an EDNS query carries an OPT record too. */
function ednsReply(q: DecodedPacket): Answer[] {
  if (!ednsOf(q)) return [];
  const opt = {
    type: 'OPT',
    name: '.',
    udpPayloadSize: EDNS_LIMIT,
    extendedRcode: 0,
    ednsVersion: 0,
    flags: 0,
    flag_do: false,
    options: [],
  };
  return [opt as Answer];
}

function fitUdp(reply: Packet, q: DecodedPacket, transport: Transport): Buffer {
  const bytes = dnsPacket.encode(reply);
  if (transport === 'tcp') return bytes;
  const opt = ednsOf(q);
  const limit = opt ? Math.min(Math.max(opt.udpPayloadSize, UDP_LIMIT), EDNS_LIMIT) : UDP_LIMIT;
  if (bytes.length <= limit) return bytes;
  return dnsPacket.encode({
    ...reply,
    flags: (reply.flags ?? 0) | dnsPacket.TRUNCATED_RESPONSE,
    answers: [],
    authorities: [],
    additionals: ednsReply(q),
  });
}
