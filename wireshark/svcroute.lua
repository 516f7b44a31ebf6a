-- svcroute.lua: Wireshark dissectors for the packet formats svcroute defines
-- or extends (docs/wireshark.md). Written for Wireshark 4.0 (Debian bookworm,
-- Lua 5.2); the field names and layouts follow stack/src/wire/*.rs.
--
--   tshark -X lua_script:wireshark/svcroute.lua -r capture.pcap -V
--   scripts/setup --wireshark-plugin     # install into the personal plugin folder
--
-- Protocols (filter prefixes):
--   gff        GFF header, IPv6 next header 253 (RFC 8677 §6.1 + type nibble)
--   nsff       nSFF transport data and NACK (GFF types 1, 2)
--   nrctl      NR and fabric control messages (GFF types 3-8)
--   rosa       the ROSA option 0x3E in a Destination Options header
--   sticky     the Sticky-Dst option 0x1E in a Destination Options header
--   sarigp     the SAR IGP on UDP 7470 (postcard envelope and bodies)
--   appmetrics App-Metrics sub-TLVs (inside sarigp App-Metrics LSAs)
--   mslp       RFC 3528 on top of Wireshark's SLP dissector: the MeshFwd
--              extension (0x0006) and AntiEtrpRqst (function 12)
-- and UDP 7471 (a SAG's hand-over, docs/sag.md) is decoded as the IPv6
-- packet it carries, NSH next protocol 0xFE as HTTP.
--
-- Every part of a message these dissectors cannot decode raises an expert
-- info: `<proto>.malformed` (group Malformed, error) for what the svcroute
-- parser refuses, `<proto>.unknown` (group Undecoded, note) for a code point
-- svcroute keeps but does not know, `nsff.checksum_bad` for a bad checksum.

if svcroute_dissectors_loaded then
    -- Loaded twice (the installed plugin and -X lua_script): keep the first.
    return
end
svcroute_dissectors_loaded = true

local band, bor, rshift, lshift = bit32.band, bit32.bor, bit32.rshift, bit32.lshift

---------------------------------------------------------------------------
-- Shared helpers
---------------------------------------------------------------------------

-- Thrown (as the error value) after a malformed expert was added: the rest
-- of the message is not decoded.
local ABORT = {}

local function new_experts(proto, abbr, name, extra)
    local e = {
        malformed = ProtoExpert.new(abbr .. ".malformed", "Malformed " .. name,
            expert.group.MALFORMED, expert.severity.ERROR),
        unknown = ProtoExpert.new(abbr .. ".unknown", "Unknown " .. name .. " code point",
            expert.group.UNDECODED, expert.severity.NOTE),
    }
    local list = { e.malformed, e.unknown }
    for _, x in ipairs(extra or {}) do
        list[#list + 1] = x
    end
    proto.experts = list
    return e
end

-- Add a malformed expert over `range` (a TvbRange) and stop decoding.
local function fail(tree, ex, range, text)
    tree:add_tvb_expert_info(ex.malformed, range, text)
    error(ABORT, 0)
end

-- Run f(...); a Lua error other than ABORT is re-raised (so a bug shows as
-- Wireshark's "Lua Error" instead of a quietly short tree).
local function guarded(f, ...)
    local ok, err = pcall(f, ...)
    if not ok and err ~= ABORT then
        error(err, 0)
    end
    return ok
end

-- Call a built-in dissector. One that throws (a truncated packet) has
-- already added Wireshark's "Malformed Packet" item; Lua's Dissector:call
-- then raises "Malformed frame" too, which is not a bug of ours: swallow it.
local function call_builtin(d, tvb, pinfo, root)
    local ok, n = pcall(d.call, d, tvb, pinfo, root)
    if ok then
        return n
    end
    if tostring(n):find("Malformed frame", 1, true) then
        return tvb:len()
    end
    error(n, 0)
end

-- A range of tvb that exists: [off, off+len) cut to the buffer. Adding a
-- range past the end to the tree throws a C exception through the Lua VM
-- (which leaks Lua's C-call count until "C stack overflow"), so every range
-- whose bounds come from the packet goes through here or a length check.
local function clamp(tvb, off, len)
    local n = tvb:len()
    off = math.max(0, math.min(off, n))
    len = math.max(0, math.min(len or (n - off), n - off))
    return tvb(off, len)
end

-- The range [off, off+len) of tvb, failing as malformed if it is not there.
local function need(tree, ex, tvb, off, len, what)
    if len < 0 or off + len > tvb:len() then
        local have = tvb:len() - off
        fail(tree, ex, clamp(tvb, off, have), string.format("%s: truncated (%d of %d octets)", what,
            math.max(have, 0), len))
    end
    return tvb(off, len)
end

local function hex(n, width)
    return string.format("0x%0" .. (width or 2) .. "x", n)
end

local function lookup(vs, v)
    return vs[v] or ("unknown " .. v)
end

-- A pathID (or any link bit field): the bytes field, and one link field per
-- bit set (bit i in octet i/8, mask 0x80 >> i%8, as stack/src/wire/gff.rs).
local function add_path(tree, f_path, f_link, range)
    local item = tree:add(f_path, range)
    local links = {}
    for i = 0, range:len() - 1 do
        local b = range:range(i, 1):uint()
        for j = 0, 7 do
            if band(b, rshift(0x80, j)) ~= 0 then
                local id = i * 8 + j
                item:add(f_link, range:range(i, 1), id)
                links[#links + 1] = id
            end
        end
    end
    local text = #links > 0 and table.concat(links, ",") or "none"
    item:append_text(" (links " .. text .. ")")
    return item, text
end

-- RFC 1071 ones-complement sum over the whole range, folded to 16 bits.
local function ones_complement_sum(range)
    local sum, n = 0, range:len()
    local i = 0
    while i + 1 < n do
        sum = sum + range:range(i, 2):uint()
        i = i + 2
    end
    if i < n then
        sum = sum + range:range(i, 1):uint() * 256
    end
    while sum > 0xffff do
        sum = band(sum, 0xffff) + rshift(sum, 16)
    end
    return sum
end

-- Microseconds since 1900-01-01 UTC (a UInt64) as an NSTime.
local function ntp_us_to_nstime(us)
    local secs = (us / 1000000):tonumber() - 2208988800
    local micros = (us % 1000000):tonumber()
    return NSTime.new(secs, micros * 1000)
end

local IP_PROTOS = { [1] = "ICMP", [6] = "TCP", [17] = "UDP", [58] = "ICMPv6", [132] = "SCTP" }

---------------------------------------------------------------------------
-- GFF (IPv6 next header 253)
---------------------------------------------------------------------------

local gff = Proto("gff", "Generic Forwarding Format (RFC 8677, svcroute)")
local GFF_TYPES = {
    [1] = "transport data", [2] = "transport NACK", [3] = "NR registration",
    [4] = "path request", [5] = "path response", [6] = "path update",
    [7] = "link event", [8] = "link hello",
}
local gf = {
    length = ProtoField.uint16("gff.length", "PathID length (bits)", base.DEC, nil, 0xfff0),
    type = ProtoField.uint16("gff.type", "Type", base.DEC, GFF_TYPES, 0x000f),
    pathid = ProtoField.bytes("gff.pathid", "PathID"),
    link = ProtoField.uint8("gff.link", "Link ID"),
    pathid_match = ProtoField.bool("gff.pathid.match", "PathID equals IPv6 source || destination"),
}
gff.fields = { gf.length, gf.type, gf.pathid, gf.link, gf.pathid_match }
local gff_mismatch = ProtoExpert.new("gff.pathid_mismatch", "PathID differs from IPv6 source || destination",
    expert.group.PROTOCOL, expert.severity.WARN)
local gff_ex = new_experts(gff, "gff", "GFF packet", { gff_mismatch })

local f_ipv6_src = Field.new("ipv6.src")
local f_ipv6_dst = Field.new("ipv6.dst")

-- The innermost IPv6 source and destination octets seen so far (hex).
local function ipv6_addrs_hex()
    local srcs, dsts = { f_ipv6_src() }, { f_ipv6_dst() }
    if #srcs == 0 or #dsts == 0 then
        return nil
    end
    return tostring(srcs[#srcs].range:bytes()) .. tostring(dsts[#dsts].range:bytes())
end

---------------------------------------------------------------------------
-- nSFF transport (GFF types 1 and 2)
---------------------------------------------------------------------------

local nsff = Proto("nsff", "nSFF transport (RFC 8677 §6.1.2, svcroute)")
local CHECKSUM_STATUS = { [0] = "Bad", [1] = "Good" }
local nf = {
    seq = ProtoField.uint32("nsff.seq", "Sequence number"),
    checksum = ProtoField.uint16("nsff.checksum", "Checksum", base.HEX),
    checksum_status = ProtoField.uint8("nsff.checksum.status", "Checksum status", base.DEC, CHECKSUM_STATUS),
    window = ProtoField.uint16("nsff.window", "Window (packets)"),
    txn = ProtoField.uint32("nsff.txn", "Transaction ID", base.HEX),
    txn_origin = ProtoField.uint32("nsff.txn.origin", "Originating nSFF", base.DEC, nil, 0xff000000),
    txn_counter = ProtoField.uint32("nsff.txn.counter", "Counter", base.DEC, nil, 0x00ffffff),
    flags = ProtoField.uint8("nsff.flags", "Flags", base.HEX),
    flag_open = ProtoField.bool("nsff.flags.open", "OPEN", 8, nil, 0x01),
    flag_response = ProtoField.bool("nsff.flags.response", "RESPONSE", 8, nil, 0x02),
    flag_reserved = ProtoField.uint8("nsff.flags.reserved", "Reserved", base.HEX, nil, 0xfc),
    origin = ProtoField.uint8("nsff.origin", "Origin nSFF"),
    rev_len = ProtoField.uint8("nsff.rev_len", "Reverse pathID length (octets)"),
    reverse = ProtoField.bytes("nsff.reverse_path", "Reverse pathID"),
    reverse_link = ProtoField.uint8("nsff.reverse_path.link", "Link ID"),
    data = ProtoField.bytes("nsff.data", "Data"),
    data_len = ProtoField.uint32("nsff.data.len", "Data length"),
    fin = ProtoField.bool("nsff.end", "End of transaction (no data)"),
    nack_txn = ProtoField.uint32("nsff.nack.txn", "Transaction ID", base.HEX),
    nack_count = ProtoField.uint16("nsff.nack.count", "Number of NACKs"),
    nack_reserved = ProtoField.uint16("nsff.nack.reserved", "Reserved", base.HEX),
    nack_seq = ProtoField.uint32("nsff.nack.seq", "NACKed sequence number"),
    nack_all = ProtoField.bool("nsff.nack.window_ack", "Acknowledges the whole window (count 0)"),
    seal_sender = ProtoField.uint16("nsff.seal.sender", "Seal: sender", base.HEX),
    seal_seq = ProtoField.uint64("nsff.seal.seq", "Seal: sequence number (µs)"),
    seal_key = ProtoField.uint8("nsff.seal.key_id", "Seal: key ID"),
    seal_tag = ProtoField.bytes("nsff.seal.tag", "Seal: HMAC-SHA256 tag (16 octets)"),
}
nsff.fields = {
    nf.seq, nf.checksum, nf.checksum_status, nf.window, nf.txn, nf.txn_origin, nf.txn_counter,
    nf.flags, nf.flag_open, nf.flag_response, nf.flag_reserved, nf.origin, nf.rev_len, nf.reverse,
    nf.reverse_link, nf.data, nf.data_len, nf.fin, nf.nack_txn, nf.nack_count, nf.nack_reserved,
    nf.nack_seq, nf.nack_all, nf.seal_sender, nf.seal_seq, nf.seal_key, nf.seal_tag,
}
local nsff_bad_checksum = ProtoExpert.new("nsff.checksum_bad", "Bad nSFF transport checksum",
    expert.group.CHECKSUM, expert.severity.ERROR)
local nsff_ex = new_experts(nsff, "nsff", "nSFF transport packet", { nsff_bad_checksum })

local function txn_text(v)
    return string.format("%d/%d", rshift(v, 24), band(v, 0xffffff))
end

local function add_txn(t, field, range)
    local item = t:add(field, range)
    item:add(nf.txn_origin, range)
    item:add(nf.txn_counter, range)
    item:append_text(" (" .. txn_text(range:uint()) .. ")")
    return range:uint()
end

-- A keyed fabric's 27-octet seal trailer (`sender:u16 seq:u64 key_id:u8
-- tag:16`, docs/security.md) after the packet `body` octets long.
local SEAL_LEN = 27
local function add_seal(t, tvb, body)
    local s = t:add(tvb(body, SEAL_LEN), "Seal (keyed fabric)")
    s:add(nf.seal_sender, tvb(body, 2))
    s:add(nf.seal_seq, tvb(body + 2, 8))
    s:add(nf.seal_key, tvb(body + 10, 1))
    s:add(nf.seal_tag, tvb(body + 11, 16))
end

local function dissect_transport_data(whole, pinfo, root)
    local t = root:add(nsff, whole(), "nSFF transport")
    need(t, nsff_ex, whole, 0, 13, "data header")
    -- Sealed (keyed fabric): the checksum covers the packet without the
    -- trailer; that it holds there and not over the whole says which.
    local tvb = whole
    if ones_complement_sum(whole()) ~= 0xffff and whole:len() >= 13 + SEAL_LEN
        and ones_complement_sum(whole(0, whole:len() - SEAL_LEN)) == 0xffff then
        tvb = whole(0, whole:len() - SEAL_LEN):tvb()
        add_seal(t, whole, whole:len() - SEAL_LEN)
    end
    local seq = tvb(0, 4):uint()
    t:add(nf.seq, tvb(0, 4))
    local ck = t:add(nf.checksum, tvb(4, 2))
    local good = ones_complement_sum(tvb()) == 0xffff
    ck:add(nf.checksum_status, tvb(4, 2), good and 1 or 0):set_generated()
    if not good then
        ck:add_tvb_expert_info(nsff_bad_checksum, tvb(4, 2), "Bad checksum")
    end
    t:add(nf.window, tvb(6, 2))
    local txn = add_txn(t, nf.txn, tvb(8, 4))
    local flags = tvb(12, 1):uint()
    local fi = t:add(nf.flags, tvb(12, 1))
    fi:add(nf.flag_open, tvb(12, 1))
    fi:add(nf.flag_response, tvb(12, 1))
    fi:add(nf.flag_reserved, tvb(12, 1))
    if band(flags, 0xfc) ~= 0 then
        fail(t, nsff_ex, tvb(12, 1), "reserved flag bits set")
    end
    local off = 13
    local words = {}
    if band(flags, 0x01) ~= 0 then
        words[#words + 1] = "OPEN"
        need(t, nsff_ex, tvb, 13, 2, "OPEN prefix")
        t:add(nf.origin, tvb(13, 1))
        if tvb(13, 1):uint() == 255 then
            fail(t, nsff_ex, tvb(13, 1), "origin nSFF 255")
        end
        local rev_len = tvb(14, 1):uint()
        t:add(nf.rev_len, tvb(14, 1))
        local rev = need(t, nsff_ex, tvb, 15, rev_len, "reverse pathID")
        if rev_len ~= 32 then
            fail(t, nsff_ex, tvb(14, 1), "reverse pathID of " .. rev_len .. " octets, not 32")
        end
        add_path(t, nf.reverse, nf.reverse_link, rev)
        off = 15 + rev_len
    end
    if band(flags, 0x02) ~= 0 then
        words[#words + 1] = "RESPONSE"
    end
    local n = tvb:len() - off
    t:add(nf.data_len, n):set_generated()
    if n > 0 then
        t:add(nf.data, tvb(off, n))
    else
        t:add(nf.fin, true):set_generated()
        words[#words + 1] = "END"
    end
    local info = string.format("transport data txn %s seq %d %s %d bytes",
        txn_text(txn), seq, table.concat(words, " "), n)
    t:append_text(": " .. info)
    return info
end

local function dissect_transport_nack(whole, pinfo, root)
    local t = root:add(nsff, whole(), "nSFF transport")
    need(t, nsff_ex, whole, 0, 8, "NACK header")
    local tvb = whole
    local count = whole(4, 2):uint()
    if whole:len() == 8 + count * 4 + SEAL_LEN then
        tvb = whole(0, 8 + count * 4):tvb()
        add_seal(t, whole, 8 + count * 4)
    end
    local txn = add_txn(t, nf.nack_txn, tvb(0, 4))
    t:add(nf.nack_count, tvb(4, 2))
    t:add(nf.nack_reserved, tvb(6, 2))
    if tvb(6, 2):uint() ~= 0 then
        fail(t, nsff_ex, tvb(6, 2), "reserved field not zero")
    end
    need(t, nsff_ex, tvb, 8, count * 4, "NACKed sequence numbers")
    local seqs = {}
    for i = 0, count - 1 do
        t:add(nf.nack_seq, tvb(8 + i * 4, 4))
        seqs[#seqs + 1] = tostring(tvb(8 + i * 4, 4):uint())
    end
    if count == 0 then
        t:add(nf.nack_all, true):set_generated()
    end
    if tvb:len() > 8 + count * 4 then
        fail(t, nsff_ex, tvb(8 + count * 4), "octets after the sequence numbers")
    end
    local info = string.format("transport NACK txn %s %s", txn_text(txn),
        count == 0 and "window ack" or ("seqs " .. table.concat(seqs, ",")))
    t:append_text(": " .. info)
    return info
end

---------------------------------------------------------------------------
-- NR and fabric control messages (GFF types 3-8)
---------------------------------------------------------------------------

local nrctl = Proto("nrctl", "NR and fabric control (RFC 8677 §6.2-6.4, svcroute)")
local TLV_TYPES = { [1] = "FQDN", [2] = "auth tag", [3] = "reverse pathID", [4] = "sequence" }
local UPDATE_KINDS = { [0] = "nSFF IDs", [1] = "link IDs" }
local LINK_STATES = { [0] = "down", [1] = "up" }
local rf = {
    flags = ProtoField.uint8("nrctl.flags", "Flags", base.HEX),
    deregister = ProtoField.bool("nrctl.flags.deregister", "R/D: deregister", 8, nil, 0x01),
    flags_reserved = ProtoField.uint8("nrctl.flags.reserved", "Reserved", base.HEX, nil, 0xfe),
    hash = ProtoField.uint16("nrctl.hash", "hash(FQDN)", base.HEX),
    nsff_id = ProtoField.uint8("nrctl.nsff_id", "nSFF ID"),
    requester = ProtoField.uint8("nrctl.requester", "Requesting nSFF"),
    serving = ProtoField.uint8("nrctl.serving", "Serving nSFF"),
    path_words = ProtoField.uint8("nrctl.path_len", "PathID length (32-bit words)", base.DEC, nil, 0xf0),
    rsp_reserved = ProtoField.uint8("nrctl.path_len.reserved", "Reserved", base.HEX, nil, 0x0f),
    found = ProtoField.bool("nrctl.found", "Name found"),
    forward = ProtoField.bytes("nrctl.forward_path", "Forward pathID"),
    forward_link = ProtoField.uint8("nrctl.forward_path.link", "Link ID"),
    update_kind = ProtoField.uint8("nrctl.update.kind", "Update type", base.DEC, UPDATE_KINDS),
    update_count = ProtoField.uint8("nrctl.update.count", "Count"),
    update_nsff = ProtoField.uint8("nrctl.update.nsff_id", "nSFF ID"),
    update_all = ProtoField.bool("nrctl.update.all", "All nSFFs (255): purge the whole cache"),
    update_link = ProtoField.uint8("nrctl.update.link_id", "Link ID"),
    update_id = ProtoField.uint8("nrctl.update.id", "ID"),
    link_id = ProtoField.uint8("nrctl.link_id", "Link ID"),
    link_state = ProtoField.uint8("nrctl.link_state", "State", base.DEC, LINK_STATES),
    sender = ProtoField.uint8("nrctl.hello.sender", "Sender node ID"),
    hello_seq = ProtoField.uint32("nrctl.hello.seq", "Sequence number"),
    tlv_type = ProtoField.uint8("nrctl.tlv.type", "TLV type", base.DEC, TLV_TYPES),
    tlv_len = ProtoField.uint8("nrctl.tlv.len", "TLV length"),
    fqdn = ProtoField.string("nrctl.fqdn", "FQDN"),
    auth_key = ProtoField.uint8("nrctl.auth.key_id", "Key ID"),
    auth_tag = ProtoField.bytes("nrctl.auth.tag", "HMAC-SHA256 tag (16 octets)"),
    reverse = ProtoField.bytes("nrctl.reverse_path", "Reverse pathID"),
    reverse_link = ProtoField.uint8("nrctl.reverse_path.link", "Link ID"),
    tlv_value = ProtoField.bytes("nrctl.tlv.value", "Value"),
    seq_sender = ProtoField.uint16("nrctl.seq.sender", "Sender", base.HEX),
    seq = ProtoField.uint64("nrctl.seq", "Sequence number (sender's clock, µs)"),
}
nrctl.fields = {
    rf.flags, rf.deregister, rf.flags_reserved, rf.hash, rf.nsff_id, rf.requester, rf.serving,
    rf.path_words, rf.rsp_reserved, rf.found, rf.forward, rf.forward_link, rf.update_kind,
    rf.update_count, rf.update_nsff, rf.update_all, rf.update_link, rf.update_id, rf.link_id,
    rf.link_state, rf.sender, rf.hello_seq, rf.tlv_type, rf.tlv_len, rf.fqdn, rf.auth_key,
    rf.auth_tag, rf.reverse, rf.reverse_link, rf.tlv_value, rf.seq_sender, rf.seq,
}
local nr_ex = new_experts(nrctl, "nrctl", "NR message")

-- A canonical FQDN (stack/src/wire/nr.rs Fqdn): lower-case LDH labels of
-- 1..63 octets, neither starting nor ending with a hyphen, 1..253 in all.
local function fqdn_ok(s)
    if #s == 0 or #s > 253 then
        return false
    end
    for label in (s .. "."):gmatch("([^.]*)%.") do
        if #label == 0 or #label > 63 or not label:match("^[a-z0-9-]+$")
            or label:sub(1, 1) == "-" or label:sub(-1) == "-" then
            return false
        end
    end
    return true
end

local function nsff_id(t, field, range)
    t:add(field, range)
    if range:uint() == 255 then
        fail(t, nr_ex, range, "nSFF ID 255 where an nSFF is required")
    end
    return range:uint()
end

-- TLVs from `off` to the end; returns a short text for the Info column.
local function nr_tlvs(t, tvb, off)
    local notes = {}
    while off < tvb:len() do
        need(t, nr_ex, tvb, off, 2, "TLV header")
        local ty, len = tvb(off, 1):uint(), tvb(off + 1, 1):uint()
        local value = need(t, nr_ex, tvb, off + 2, len, "TLV value")
        local st = t:add(tvb(off, 2 + len), "TLV: " .. lookup(TLV_TYPES, ty))
        st:add(rf.tlv_type, tvb(off, 1))
        st:add(rf.tlv_len, tvb(off + 1, 1))
        if ty == 1 then
            local name = value:string()
            st:add(rf.fqdn, value)
            st:append_text(": " .. name)
            if not fqdn_ok(name) then
                fail(st, nr_ex, value, "FQDN not canonical (lower-case host name, no trailing dot)")
            end
            notes[#notes + 1] = name
        elseif ty == 2 then
            if len ~= 17 then
                fail(st, nr_ex, value, "auth tag of " .. len .. " octets, not 17")
            end
            st:add(rf.auth_key, value:range(0, 1))
            st:add(rf.auth_tag, value:range(1, 16))
            st:append_text(": key " .. value:range(0, 1):uint())
            if off + 2 + len ~= tvb:len() then
                fail(st, nr_ex, tvb(off, 2 + len), "auth tag is not the last TLV")
            end
            notes[#notes + 1] = "auth"
        elseif ty == 3 then
            if len ~= 32 then
                fail(st, nr_ex, value, "reverse pathID of " .. len .. " octets, not 32")
            end
            local _, links = add_path(st, rf.reverse, rf.reverse_link, value)
            notes[#notes + 1] = "reverse " .. links
        elseif ty == 4 then
            if len ~= 10 then
                fail(st, nr_ex, value, "sequence of " .. len .. " octets, not 10")
            else
                st:add(rf.seq_sender, value:range(0, 2))
                st:add(rf.seq, value:range(2, 8))
            end
            notes[#notes + 1] = "seq"
        else
            if len > 0 then
                st:add(rf.tlv_value, value)
            end
            st:add_tvb_expert_info(nr_ex.unknown, tvb(off, 1), "Unknown TLV type " .. ty)
        end
        off = off + 2 + len
    end
    return table.concat(notes, " ")
end

local function dissect_nr(tvb, pinfo, root, ty)
    local t = root:add(nrctl, tvb(), "NR message")
    local info
    local rest
    if ty == 3 then
        need(t, nr_ex, tvb, 0, 4, "registration")
        local flags = tvb(0, 1):uint()
        local fi = t:add(rf.flags, tvb(0, 1))
        fi:add(rf.deregister, tvb(0, 1))
        fi:add(rf.flags_reserved, tvb(0, 1))
        if band(flags, 0xfe) ~= 0 then
            fail(t, nr_ex, tvb(0, 1), "reserved flag bits set")
        end
        t:add(rf.hash, tvb(1, 2))
        local id = nsff_id(t, rf.nsff_id, tvb(3, 1))
        info = string.format("%s hash %s nSFF %d", band(flags, 1) ~= 0 and "deregister" or "register",
            hex(tvb(1, 2):uint(), 4), id)
        rest = 4
    elseif ty == 4 then
        need(t, nr_ex, tvb, 0, 3, "path request")
        t:add(rf.hash, tvb(0, 2))
        local id = nsff_id(t, rf.requester, tvb(2, 1))
        info = string.format("path request hash %s from nSFF %d", hex(tvb(0, 2):uint(), 4), id)
        rest = 3
    elseif ty == 5 then
        need(t, nr_ex, tvb, 0, 4, "path response")
        t:add(rf.hash, tvb(0, 2))
        local serving = tvb(2, 1):uint()
        local lb = tvb(3, 1):uint()
        t:add(rf.serving, tvb(2, 1))
        t:add(rf.path_words, tvb(3, 1))
        t:add(rf.rsp_reserved, tvb(3, 1))
        if band(lb, 0x0f) ~= 0 then
            fail(t, nr_ex, tvb(3, 1), "reserved bits set")
        end
        local words = rshift(lb, 4)
        if words == 0 then
            if serving ~= 255 then
                fail(t, nr_ex, tvb(2, 1), "not found (length 0) but serving nSFF " .. serving .. ", not 255")
            end
            t:add(rf.found, false):set_generated()
            info = string.format("path response hash %s: not found", hex(tvb(0, 2):uint(), 4))
            rest = 4
        elseif words == 8 then
            if serving == 255 then
                fail(t, nr_ex, tvb(2, 1), "serving nSFF 255 in a found answer")
            end
            t:add(rf.found, true):set_generated()
            local fwd = need(t, nr_ex, tvb, 4, 32, "forward pathID")
            local _, links = add_path(t, rf.forward, rf.forward_link, fwd)
            info = string.format("path response hash %s: nSFF %d links %s", hex(tvb(0, 2):uint(), 4),
                serving, links)
            rest = 36
        else
            fail(t, nr_ex, tvb(3, 1), "pathID length of " .. words .. " words, not 0 or 8")
        end
    elseif ty == 6 then
        need(t, nr_ex, tvb, 0, 2, "path update")
        local kind, count = tvb(0, 1):uint(), tvb(1, 1):uint()
        t:add(rf.update_kind, tvb(0, 1))
        if not UPDATE_KINDS[kind] then
            t:add_tvb_expert_info(nr_ex.unknown, tvb(0, 1), "Unknown path update type " .. kind)
        end
        t:add(rf.update_count, tvb(1, 1))
        need(t, nr_ex, tvb, 2, count, "path update IDs")
        local ids = {}
        for i = 0, count - 1 do
            local r = tvb(2 + i, 1)
            if kind == 0 then
                local it = t:add(rf.update_nsff, r)
                if r:uint() == 255 then
                    it:add(rf.update_all, true):set_generated()
                end
            elseif kind == 1 then
                t:add(rf.update_link, r)
            else
                t:add(rf.update_id, r)
            end
            ids[#ids + 1] = tostring(r:uint())
        end
        info = string.format("path update %s %s", lookup(UPDATE_KINDS, kind), table.concat(ids, ","))
        rest = 2 + count
    elseif ty == 7 then
        need(t, nr_ex, tvb, 0, 2, "link event")
        t:add(rf.link_id, tvb(0, 1))
        local state = tvb(1, 1):uint()
        t:add(rf.link_state, tvb(1, 1))
        if not LINK_STATES[state] then
            t:add_tvb_expert_info(nr_ex.unknown, tvb(1, 1), "Unknown link state " .. state)
        end
        info = string.format("link event link %d %s", tvb(0, 1):uint(), lookup(LINK_STATES, state))
        rest = 2
    else
        need(t, nr_ex, tvb, 0, 6, "link hello")
        t:add(rf.sender, tvb(0, 1))
        t:add(rf.link_id, tvb(1, 1))
        t:add(rf.hello_seq, tvb(2, 4))
        info = string.format("link hello from %d link %d seq %d", tvb(0, 1):uint(), tvb(1, 1):uint(),
            tvb(2, 4):uint())
        rest = 6
    end
    t:append_text(": " .. info)
    local notes = nr_tlvs(t, tvb, rest)
    if #notes > 0 then
        info = info .. " [" .. notes .. "]"
    end
    return info
end

function gff.dissector(tvb, pinfo, root)
    if tvb:len() == 0 then
        return 0
    end
    pinfo.cols.protocol = "GFF"
    local t = root:add(gff, tvb())
    local info = "GFF"
    guarded(function()
        need(t, gff_ex, tvb, 0, 2, "GFF header")
        local word = tvb(0, 2):uint()
        local bits, ty = rshift(word, 4), band(word, 0x0f)
        t:add(gf.length, tvb(0, 2))
        t:add(gf.type, tvb(0, 2))
        info = "GFF " .. lookup(GFF_TYPES, ty)
        if bits % 8 ~= 0 then
            fail(t, gff_ex, tvb(0, 2), "pathID length " .. bits .. " is not whole octets")
        end
        local path = need(t, gff_ex, tvb, 2, bits / 8, "pathID")
        if bits ~= 256 then
            fail(t, gff_ex, tvb(0, 2), "pathID of " .. bits .. " bits, not 256")
        end
        local item = add_path(t, gf.pathid, gf.link, path)
        local addrs = ipv6_addrs_hex()
        if addrs then
            local same = addrs == tostring(path:bytes())
            item:add(gf.pathid_match, same):set_generated()
            if not same then
                item:add_tvb_expert_info(gff_mismatch, path, "PathID differs from IPv6 source || destination")
            end
        end
        t:append_text(", " .. lookup(GFF_TYPES, ty))
        if ty >= 1 and ty <= 8 and tvb:len() == 34 then
            fail(t, gff_ex, tvb(0, 2), lookup(GFF_TYPES, ty) .. " without a payload")
        end
        local payload = tvb:len() > 34 and tvb(34):tvb()
        if ty == 1 then
            info = "GFF " .. dissect_transport_data(payload, pinfo, root)
        elseif ty == 2 then
            info = "GFF " .. dissect_transport_nack(payload, pinfo, root)
        elseif ty >= 3 and ty <= 8 then
            info = "GFF " .. dissect_nr(payload, pinfo, root, ty)
        else
            t:add_tvb_expert_info(gff_ex.unknown, tvb(0, 2), "Unknown GFF type " .. ty)
            if tvb:len() > 34 then
                call_builtin(Dissector.get("data"), payload, pinfo, root)
            end
        end
    end)
    pinfo.cols.info = info
    return tvb:len()
end

---------------------------------------------------------------------------
-- The ROSA option (0x3E)
---------------------------------------------------------------------------

local rosa = Proto("rosa", "ROSA option (svcroute)")
local ROSA_MSGS = { [1] = "announcement", [2] = "request", [3] = "response", [4] = "withdrawal" }
local ROSA_ENTRIES = {
    [1] = "Service", [2] = "Client", [3] = "Ingress", [4] = "Instance", [5] = "Port",
    [6] = "Constraint", [7] = "SAG", [8] = "Auth",
}
local CONSTRAINTS = {
    [1] = "mode+policy", [2] = "capability", [3] = "load", [4] = "latency (µs)",
    [5] = "preference", [6] = "lifetime (s)",
}
local MODES = { [0] = "routing", [1] = "scheduling" }
local POLICIES = {
    [0] = "shortest", [1] = "random", [2] = "round-robin", [3] = "weighted",
    [4] = "min-metric", [5] = "app-metrics cost",
}
local of = {
    version = ProtoField.uint8("rosa.version", "Version", base.DEC, nil, 0xf0),
    msg = ProtoField.uint8("rosa.msg", "Message", base.DEC, ROSA_MSGS, 0x0f),
    entry_type = ProtoField.uint8("rosa.entry.type", "Entry type", base.DEC, ROSA_ENTRIES),
    entry_len = ProtoField.uint8("rosa.entry.len", "Entry length"),
    service = ProtoField.string("rosa.service", "Service name"),
    seg_type = ProtoField.uint16("rosa.service.segment.type", "Segment type"),
    seg_len = ProtoField.uint16("rosa.service.segment.len", "Segment length"),
    segment = ProtoField.string("rosa.service.segment", "Segment"),
    client = ProtoField.ipv6("rosa.client", "Client"),
    client4 = ProtoField.ipv4("rosa.client.v4", "Client"),
    ingress = ProtoField.ipv6("rosa.ingress", "Ingress"),
    ingress4 = ProtoField.ipv4("rosa.ingress.v4", "Ingress"),
    instance = ProtoField.ipv6("rosa.instance", "Instance"),
    instance4 = ProtoField.ipv4("rosa.instance.v4", "Instance"),
    sag = ProtoField.ipv6("rosa.sag", "SAG"),
    sag4 = ProtoField.ipv4("rosa.sag.v4", "SAG"),
    port_proto = ProtoField.uint8("rosa.port.proto", "Transport protocol", base.DEC, IP_PROTOS),
    port = ProtoField.uint16("rosa.port", "Port"),
    c_type = ProtoField.uint8("rosa.constraint.type", "Constraint type", base.DEC, CONSTRAINTS),
    c_len = ProtoField.uint8("rosa.constraint.len", "Constraint length"),
    mode = ProtoField.uint8("rosa.constraint.mode", "Mode", base.DEC, MODES),
    policy = ProtoField.uint8("rosa.constraint.policy", "Policy", base.DEC, POLICIES),
    capability = ProtoField.uint32("rosa.constraint.capability", "Capability"),
    load = ProtoField.uint32("rosa.constraint.load", "Load"),
    latency = ProtoField.uint32("rosa.constraint.latency_us", "Latency (µs)"),
    preference = ProtoField.uint32("rosa.constraint.preference", "Preference"),
    lifetime = ProtoField.uint32("rosa.constraint.lifetime_s", "Lifetime (s)"),
    c_value = ProtoField.bytes("rosa.constraint.value", "Value"),
    auth_key = ProtoField.uint8("rosa.auth.key_id", "Key ID"),
    auth_tag = ProtoField.bytes("rosa.auth.tag", "HMAC-SHA256 tag (16 octets)"),
    value = ProtoField.bytes("rosa.entry.value", "Value"),
}
rosa.fields = {
    of.version, of.msg, of.entry_type, of.entry_len, of.service, of.seg_type, of.seg_len, of.segment,
    of.client, of.client4, of.ingress, of.ingress4, of.instance, of.instance4, of.sag, of.sag4,
    of.port_proto, of.port, of.c_type, of.c_len, of.mode, of.policy, of.capability, of.load,
    of.latency, of.preference, of.lifetime, of.c_value, of.auth_key, of.auth_tag, of.value,
}
local rosa_ex = new_experts(rosa, "rosa", "ROSA option")

-- A service name's wire encoding (range may be empty: `*`): segments
-- `type:u16 (=1) len:u16 bytes`, at most 128 octets, each segment 1..124
-- visible ASCII octets other than '/' and '*'. Returns the textual name.
local function add_service_name(t, ex, range, tvb, off, len)
    if len > 128 then
        fail(t, ex, range, "service name of " .. len .. " octets, over 128")
    end
    local segs = {}
    local pos, stop = off, off + len
    local sub = t
    while pos < stop do
        if pos + 4 > stop then
            fail(t, ex, tvb(pos, stop - pos), "name segment header cut short")
        end
        local sty, slen = tvb(pos, 2):uint(), tvb(pos + 2, 2):uint()
        if pos + 4 + slen > stop then
            fail(t, ex, tvb(pos, stop - pos), "name segment runs past the name")
        end
        local seg = tvb(pos + 4, slen)
        local st = sub:add(tvb(pos, 4 + slen), "Segment")
        st:add(of.seg_type, tvb(pos, 2))
        st:add(of.seg_len, tvb(pos + 2, 2))
        if sty ~= 1 then
            fail(st, ex, tvb(pos, 2), "segment type " .. sty .. ", not 1")
        end
        if slen == 0 then
            fail(st, ex, tvb(pos + 2, 2), "empty segment")
        end
        local s = seg:string()
        if not s:match("^[\33-\126]+$") or s:find("[/*]") then
            fail(st, ex, seg, "segment is not visible ASCII without '/' and '*'")
        end
        st:add(of.segment, seg)
        st:append_text(": " .. s)
        segs[#segs + 1] = s
        pos = pos + 4 + slen
    end
    local name = #segs > 0 and table.concat(segs, "/") or "*"
    return name
end

local ADDR_FIELDS = {
    [2] = { of.client, of.client4 }, [3] = { of.ingress, of.ingress4 },
    [4] = { of.instance, of.instance4 }, [7] = { of.sag, of.sag4 },
}

-- Nested constraint entries over [off, off+len).
local function rosa_constraints(t, tvb, off, len)
    local seen = {}
    local stop = off + len
    local parts = {}
    while off < stop do
        if off + 2 > stop or off + 2 + tvb(off + 1, 1):uint() > stop then
            fail(t, rosa_ex, tvb(off, stop - off), "constraint runs past its entry")
        end
        local ty, clen = tvb(off, 1):uint(), tvb(off + 1, 1):uint()
        local v = tvb(off + 2, clen)
        local st = t:add(tvb(off, 2 + clen), "Constraint: " .. lookup(CONSTRAINTS, ty))
        st:add(of.c_type, tvb(off, 1))
        st:add(of.c_len, tvb(off + 1, 1))
        if CONSTRAINTS[ty] then
            if seen[ty] then
                fail(st, rosa_ex, tvb(off, 1), "constraint type " .. ty .. " repeated")
            end
            seen[ty] = true
        end
        if ty == 1 then
            if clen ~= 2 then
                fail(st, rosa_ex, tvb(off + 1, 1), "mode+policy of " .. clen .. " octets, not 2")
            end
            local m, p = v:range(0, 1):uint(), v:range(1, 1):uint()
            st:add(of.mode, v:range(0, 1))
            st:add(of.policy, v:range(1, 1))
            if not MODES[m] then
                st:add_tvb_expert_info(rosa_ex.unknown, v:range(0, 1), "Unknown mode " .. m)
            end
            if not POLICIES[p] then
                st:add_tvb_expert_info(rosa_ex.unknown, v:range(1, 1), "Unknown policy " .. p)
            end
            st:append_text(": " .. lookup(MODES, m) .. "/" .. lookup(POLICIES, p))
            parts[#parts + 1] = lookup(MODES, m) .. "/" .. lookup(POLICIES, p)
        elseif ty >= 2 and ty <= 6 then
            if clen ~= 4 then
                fail(st, rosa_ex, tvb(off + 1, 1), CONSTRAINTS[ty] .. " of " .. clen .. " octets, not 4")
            end
            local f = ({ of.capability, of.load, of.latency, of.preference, of.lifetime })[ty - 1]
            st:add(f, v)
            st:append_text(": " .. v:uint())
        else
            if clen > 0 then
                st:add(of.c_value, v)
            end
            st:add_tvb_expert_info(rosa_ex.unknown, tvb(off, 1), "Unknown constraint type " .. ty)
        end
        off = off + 2 + clen
    end
    return table.concat(parts, " ")
end

-- The option data in `data` (a TvbRange). Returns a summary for Info.
local function dissect_rosa(data, pinfo, root)
    local tvb = data:tvb()
    local t = root:add(rosa, data)
    local summary = "ROSA"
    guarded(function()
        need(t, rosa_ex, tvb, 0, 1, "ROSA option")
        local ver, kind = rshift(tvb(0, 1):uint(), 4), band(tvb(0, 1):uint(), 0x0f)
        t:add(of.version, tvb(0, 1))
        t:add(of.msg, tvb(0, 1))
        summary = "ROSA " .. lookup(ROSA_MSGS, kind)
        t:append_text(": " .. lookup(ROSA_MSGS, kind))
        if ver ~= 1 then
            fail(t, rosa_ex, tvb(0, 1), "version " .. ver .. ", not 1")
        end
        if not ROSA_MSGS[kind] then
            t:add_tvb_expert_info(rosa_ex.unknown, tvb(0, 1), "Unknown message kind " .. kind)
        end
        local seen = {}
        local off = 1
        local name
        while off < tvb:len() do
            if off + 2 > tvb:len() or off + 2 + tvb(off + 1, 1):uint() > tvb:len() then
                fail(t, rosa_ex, tvb(off), "entry runs past the option")
            end
            local ty, len = tvb(off, 1):uint(), tvb(off + 1, 1):uint()
            local v = tvb(off + 2, len)
            local st = t:add(tvb(off, 2 + len), lookup(ROSA_ENTRIES, ty))
            st:add(of.entry_type, tvb(off, 1))
            st:add(of.entry_len, tvb(off + 1, 1))
            if ROSA_ENTRIES[ty] then
                if seen[ty] then
                    fail(st, rosa_ex, tvb(off, 1), ROSA_ENTRIES[ty] .. " entry repeated")
                end
                seen[ty] = true
            end
            if ty == 1 then
                name = add_service_name(st, rosa_ex, tvb(off, 2 + len), tvb, off + 2, len)
                st:add(of.service, tvb(off, 2 + len), name):set_generated()
                st:append_text(": " .. name)
            elseif ADDR_FIELDS[ty] then
                if len == 16 then
                    st:add(ADDR_FIELDS[ty][1], v)
                    st:append_text(": " .. tostring(v:ipv6()))
                elseif len == 4 then
                    st:add(ADDR_FIELDS[ty][2], v)
                    st:append_text(": " .. tostring(v:ipv4()))
                else
                    fail(st, rosa_ex, tvb(off + 1, 1), "address of " .. len .. " octets, not 4 or 16")
                end
            elseif ty == 5 then
                if len ~= 3 then
                    fail(st, rosa_ex, tvb(off + 1, 1), "port of " .. len .. " octets, not 3")
                end
                st:add(of.port_proto, v:range(0, 1))
                st:add(of.port, v:range(1, 2))
                st:append_text(string.format(": %s/%d", lookup(IP_PROTOS, v:range(0, 1):uint()),
                    v:range(1, 2):uint()))
            elseif ty == 6 then
                local text = rosa_constraints(st, tvb, off + 2, len)
                if #text > 0 then
                    st:append_text(": " .. text)
                end
            elseif ty == 8 then
                if len ~= 17 then
                    fail(st, rosa_ex, tvb(off + 1, 1), "auth of " .. len .. " octets, not 17")
                end
                st:add(of.auth_key, v:range(0, 1))
                st:add(of.auth_tag, v:range(1, 16))
                st:append_text(": key " .. v:range(0, 1):uint())
            else
                if len > 0 then
                    st:add(of.value, v)
                end
                st:add_tvb_expert_info(rosa_ex.unknown, tvb(off, 1), "Unknown entry type " .. ty)
            end
            off = off + 2 + len
        end
        if name then
            summary = summary .. " " .. name
            t:append_text(" " .. name)
        end
    end)
    return summary
end

---------------------------------------------------------------------------
-- The Sticky-Dst option (0x1E)
---------------------------------------------------------------------------

local sticky = Proto("sticky", "Sticky-Dst option (svcroute)")
local STICKY_TYPES = { [1] = "unicast sticky egress", [2] = "APN6 sticky ID" }
local AFIS = { [1] = "IPv4", [2] = "IPv6" }
local sf = {
    type = ProtoField.uint8("sticky.type", "Sticky type", base.DEC, STICKY_TYPES),
    len = ProtoField.uint8("sticky.len", "Length"),
    afi = ProtoField.uint8("sticky.afi", "AFI", base.DEC, AFIS),
    reserved = ProtoField.uint8("sticky.reserved", "Reserved", base.HEX),
    egress = ProtoField.ipv6("sticky.egress", "Sticky egress"),
    egress4 = ProtoField.ipv4("sticky.egress.v4", "Sticky egress"),
    level = ProtoField.uint8("sticky.level", "Sticky level"),
    service_id = ProtoField.uint8("sticky.service_id", "Sticky service ID"),
    flow_id = ProtoField.uint8("sticky.flow_id", "Flow ID"),
    value = ProtoField.bytes("sticky.value", "Value"),
}
sticky.fields = {
    sf.type, sf.len, sf.afi, sf.reserved, sf.egress, sf.egress4, sf.level, sf.service_id,
    sf.flow_id, sf.value,
}
local sticky_ex = new_experts(sticky, "sticky", "Sticky-Dst option")

local function dissect_sticky(data, pinfo, root)
    local tvb = data:tvb()
    local t = root:add(sticky, data)
    local parts = {}
    guarded(function()
        if tvb:len() == 0 then
            fail(t, sticky_ex, data, "no sub-TLV")
        end
        local off = 0
        while off < tvb:len() do
            if off + 2 > tvb:len() or off + 2 + tvb(off + 1, 1):uint() > tvb:len() then
                fail(t, sticky_ex, tvb(off), "sub-TLV runs past the option")
            end
            local ty, len = tvb(off, 1):uint(), tvb(off + 1, 1):uint()
            local st = t:add(tvb(off, 2 + len), lookup(STICKY_TYPES, ty))
            st:add(sf.type, tvb(off, 1))
            st:add(sf.len, tvb(off + 1, 1))
            if ty == 1 then
                if len < 2 then
                    fail(st, sticky_ex, tvb(off + 1, 1), "length " .. len .. " leaves no room for AFI")
                end
                local afi = tvb(off + 2, 1):uint()
                st:add(sf.afi, tvb(off + 2, 1))
                st:add(sf.reserved, tvb(off + 3, 1))
                if tvb(off + 3, 1):uint() ~= 0 then
                    fail(st, sticky_ex, tvb(off + 3, 1), "reserved octet not zero")
                end
                local want = ({ [1] = 6, [2] = 18 })[afi]
                if not want then
                    fail(st, sticky_ex, tvb(off + 2, 1), "AFI " .. afi .. ", not 1 or 2")
                end
                if len ~= want then
                    fail(st, sticky_ex, tvb(off + 1, 1), "length " .. len .. " does not match AFI " .. afi)
                end
                local a = tvb(off + 4, len - 2)
                local text
                if afi == 2 then
                    st:add(sf.egress, a)
                    text = tostring(a:ipv6())
                else
                    st:add(sf.egress4, a)
                    text = tostring(a:ipv4())
                end
                st:append_text(": " .. text)
                parts[#parts + 1] = "egress " .. text
            elseif ty == 2 then
                if len ~= 4 then
                    fail(st, sticky_ex, tvb(off + 1, 1), "APN6 sticky ID of " .. len .. " octets, not 4")
                end
                st:add(sf.level, tvb(off + 2, 1))
                st:add(sf.service_id, tvb(off + 3, 1))
                st:add(sf.reserved, tvb(off + 4, 1))
                if tvb(off + 4, 1):uint() ~= 0 then
                    fail(st, sticky_ex, tvb(off + 4, 1), "reserved octet not zero")
                end
                st:add(sf.flow_id, tvb(off + 5, 1))
                local text = string.format("level %d service %d flow %d", tvb(off + 2, 1):uint(),
                    tvb(off + 3, 1):uint(), tvb(off + 5, 1):uint())
                st:append_text(": " .. text)
                parts[#parts + 1] = "APN6 " .. text
            else
                if len > 0 then
                    st:add(sf.value, tvb(off + 2, len))
                end
                st:add_tvb_expert_info(sticky_ex.unknown, tvb(off, 1), "Unknown sticky type " .. ty)
            end
            off = off + 2 + len
        end
    end)
    if #parts == 0 then
        return "Sticky-Dst"
    end
    t:append_text(": " .. table.concat(parts, ", "))
    return "Sticky-Dst " .. table.concat(parts, ", ")
end

---------------------------------------------------------------------------
-- Destination Options: chain to the built-in dissector, add ROSA/Sticky
---------------------------------------------------------------------------

-- Wireshark 4.0's IPv6 dissector decodes option types in a switch and shows
-- 0x1E and 0x3E as "Experimental" octets; it has no dissector table for
-- option types. So this wraps its Destination Options handle (ip.proto 60):
-- the built-in still dissects the header and everything after it, and we
-- add one tree per ROSA or Sticky option found walking the header.
local dstopts = Proto("svcroute", "svcroute IPv6 Destination Options hook")
local OPT_TYPES = { [0x00] = "Pad1", [0x01] = "PadN", [0x1e] = "Sticky-Dst", [0x3e] = "ROSA" }
local df = {
    nxt = ProtoField.uint8("svcroute.dstopts.nxt", "Next Header", base.DEC),
    len = ProtoField.uint8("svcroute.dstopts.len", "Length (8-octet units, minus 1)"),
    opt_type = ProtoField.uint8("svcroute.dstopts.option", "Option type", base.HEX, OPT_TYPES),
    opt_len = ProtoField.uint8("svcroute.dstopts.option.len", "Option length"),
}
dstopts.fields = { df.nxt, df.len, df.opt_type, df.opt_len }
local ipproto = DissectorTable.get("ip.proto")
local builtin_dstopts = ipproto:get_dissector(60)

-- Wireshark 4.0 throws "Malformed Packet" on a Destination Options header
-- whose last option is a Pad1 in the very last captured octet (it reads a
-- length octet Pad1 does not have), which every ROSA announcement with no
-- upper layer (next header 59) and an odd option length is. For that case
-- only, the header is shown by this hook instead of the built-in.
local function own_dstopts(tvb, pinfo, root, hlen)
    local t = root:add(dstopts, tvb(0, hlen),
        "Destination Options for IPv6 (shown by svcroute.lua: Wireshark 4.0 cannot read a final Pad1)")
    t:add(df.nxt, tvb(0, 1))
    t:add(df.len, tvb(1, 1))
    local off = 2
    while off < hlen do
        local ty = tvb(off, 1):uint()
        local len = ty == 0 and 0 or tvb(off + 1, 1):uint()
        local size = ty == 0 and 1 or 2 + len
        local o = t:add(df.opt_type, tvb(off, size), ty)
        if ty ~= 0 then
            o:add(df.opt_len, tvb(off + 1, 1))
        end
        off = off + size
    end
    if tvb(0, 1):uint() == 59 then
        pinfo.cols.info = "IPv6 no next header"
    end
    return hlen
end

function dstopts.dissector(tvb, pinfo, root)
    local found = {}
    local final_pad1 = false
    local hlen = 0
    if tvb:len() >= 2 then
        hlen = (tvb(1, 1):uint() + 1) * 8
        local off = 2
        while hlen <= tvb:len() and off < hlen do
            local ty = tvb(off, 1):uint()
            if ty == 0 then
                final_pad1 = off == hlen - 1 and hlen == tvb:len()
                off = off + 1
            else
                if off + 2 > hlen or off + 2 + tvb(off + 1, 1):uint() > hlen then
                    break -- the built-in flags the bad length
                end
                local len = tvb(off + 1, 1):uint()
                if ty == 0x3e or ty == 0x1e then
                    found[#found + 1] = { ty, off + 2, len }
                end
                off = off + 2 + len
            end
        end
    end
    local summaries = {}
    for _, o in ipairs(found) do
        local data = tvb(o[2], o[3])
        if o[1] == 0x3e then
            summaries[#summaries + 1] = dissect_rosa(data, pinfo, root)
        else
            summaries[#summaries + 1] = dissect_sticky(data, pinfo, root)
        end
    end
    local n
    if final_pad1 then
        n = own_dstopts(tvb, pinfo, root, hlen)
    else
        n = call_builtin(builtin_dstopts, tvb, pinfo, root)
    end
    if #summaries > 0 then
        pinfo.cols.info:prepend("[" .. table.concat(summaries, "; ") .. "] ")
    end
    return n
end

---------------------------------------------------------------------------
-- App-Metrics sub-TLVs
---------------------------------------------------------------------------

local appmetrics = Proto("appmetrics", "App-Metrics sub-TLVs (svcroute)")
local METRICS = {
    [1] = "Aggregated Load Index", [2] = "Raw Load", [3] = "Capacity Index", [4] = "Preference Index",
    [5] = "Tunnel", [6] = "Aggregated Cost",
}
local TUNNELS = { [1] = "IPv6-in-IPv6", [2] = "GRE" }
local af = {
    type = ProtoField.uint16("appmetrics.type", "Type", base.DEC, METRICS),
    len = ProtoField.uint16("appmetrics.len", "Length"),
    period = ProtoField.uint32("appmetrics.period_s", "Measurement period (s)"),
    index = ProtoField.uint32("appmetrics.index", "Index"),
    to_packets = ProtoField.uint64("appmetrics.to_packets", "Packets to the server"),
    from_packets = ProtoField.uint64("appmetrics.from_packets", "Packets from the server"),
    to_bytes = ProtoField.uint64("appmetrics.to_bytes", "Octets to the server"),
    from_bytes = ProtoField.uint64("appmetrics.from_bytes", "Octets from the server"),
    capacity = ProtoField.uint32("appmetrics.capacity", "Capacity index"),
    preference = ProtoField.uint32("appmetrics.preference", "Preference index"),
    tunnel = ProtoField.uint32("appmetrics.tunnel", "Tunnel", base.DEC, TUNNELS),
    cost = ProtoField.uint32("appmetrics.cost", "Aggregated cost"),
    value = ProtoField.bytes("appmetrics.value", "Value"),
}
appmetrics.fields = {
    af.type, af.len, af.period, af.index, af.to_packets, af.from_packets, af.to_bytes,
    af.from_bytes, af.capacity, af.preference, af.tunnel, af.cost, af.value,
}
local am_ex = new_experts(appmetrics, "appmetrics", "App-Metrics sub-TLV")
local METRIC_LEN = { [1] = 8, [2] = 36, [3] = 4, [4] = 4, [5] = 4, [6] = 4 }

-- Sub-TLVs over `range` (a TvbRange, possibly empty). Returns a summary.
local function dissect_appmetrics(tvb, off, len, root)
    local t = root:add(appmetrics, tvb(off, len))
    local parts = {}
    if len > 1024 then
        fail(t, am_ex, tvb(off, len), "App-Metrics list of " .. len .. " octets, over 1024")
    end
    local stop, count = off + len, 0
    while off < stop do
        if off + 4 > stop or off + 4 + tvb(off + 2, 2):uint() > stop then
            fail(t, am_ex, tvb(off, stop - off), "sub-TLV runs past the list")
        end
        count = count + 1
        if count > 16 then
            fail(t, am_ex, tvb(off, stop - off), "more than 16 sub-TLVs")
        end
        local ty, l = tvb(off, 2):uint(), tvb(off + 2, 2):uint()
        local v = tvb(off + 4, l)
        local st = t:add(tvb(off, 4 + l), lookup(METRICS, ty))
        st:add(af.type, tvb(off, 2))
        st:add(af.len, tvb(off + 2, 2))
        if METRIC_LEN[ty] and METRIC_LEN[ty] ~= l then
            fail(st, am_ex, tvb(off + 2, 2), METRICS[ty] .. " of " .. l .. " octets, not " .. METRIC_LEN[ty])
        end
        if ty == 1 then
            st:add(af.period, v:range(0, 4))
            st:add(af.index, v:range(4, 4))
            parts[#parts + 1] = "load index " .. v:range(4, 4):uint()
        elseif ty == 2 then
            st:add(af.period, v:range(0, 4))
            st:add(af.to_packets, v:range(4, 8))
            st:add(af.from_packets, v:range(12, 8))
            st:add(af.to_bytes, v:range(20, 8))
            st:add(af.from_bytes, v:range(28, 8))
            parts[#parts + 1] = "raw load"
        elseif ty == 3 then
            st:add(af.capacity, v)
            parts[#parts + 1] = "capacity " .. v:uint()
        elseif ty == 4 then
            st:add(af.preference, v)
            parts[#parts + 1] = "preference " .. v:uint()
        elseif ty == 5 then
            st:add(af.tunnel, v)
            parts[#parts + 1] = "tunnel " .. lookup(TUNNELS, v:uint())
            if not TUNNELS[v:uint()] then
                st:add_tvb_expert_info(am_ex.unknown, v, "Unknown tunnel type " .. v:uint())
            end
        elseif ty == 6 then
            st:add(af.cost, v)
            parts[#parts + 1] = "aggregated cost " .. v:uint()
        else
            if l > 0 then
                st:add(af.value, v)
            end
            st:add_tvb_expert_info(am_ex.unknown, tvb(off, 2), "Unknown App-Metrics type " .. ty)
        end
        off = off + 4 + l
    end
    local summary = table.concat(parts, ", ")
    t:append_text(": " .. summary)
    return summary
end

---------------------------------------------------------------------------
-- The SAR IGP (UDP 7470): postcard
---------------------------------------------------------------------------
-- postcard (serde): u8 raw; u16/u32/u64 and lengths as unsigned LEB128
-- varints (at most 3/5/10 octets, the last one within range); Option and
-- bool as 0/1; sequences and byte strings as a varint count then items;
-- arrays ([u8; 16], Ipv6Addr) as their items, no count; enums as a varint
-- variant index then the content; structs as their fields in order.
-- IpAddr: variant 0 V4 (4 octets), 1 V6 (16).

local sarigp = Proto("sarigp", "SAR IGP (svcroute, postcard)")
local IGP_TYPES = { [1] = "hello", [2] = "LSA", [3] = "LS ack", [4] = "probe" }
local LSA_KINDS = { [0] = "router links", [1] = "services", [2] = "App-Metrics", [3] = "sticky" }
local OPTION = { [0] = "None", [1] = "Some" }
local CONSTRAINT_VARIANTS = {
    [0] = "mode+policy", [1] = "capability", [2] = "load", [3] = "latency (µs)",
    [4] = "preference", [5] = "lifetime (s)", [6] = "unknown",
}
local STICKY_KEYS = { [0] = "flow label", [1] = "UE address" }
local IPADDR = { [0] = "V4", [1] = "V6" }
local gp = {
    version = ProtoField.uint8("sarigp.version", "Version"),
    msg_type = ProtoField.uint8("sarigp.msg_type", "Message type", base.DEC, IGP_TYPES),
    auth = ProtoField.uint8("sarigp.auth", "Auth", base.DEC, OPTION),
    auth_key = ProtoField.uint8("sarigp.auth.key_id", "Key ID"),
    auth_tag = ProtoField.bytes("sarigp.auth.tag", "HMAC-SHA256 tag (16 octets)"),
    body_len = ProtoField.uint32("sarigp.body_len", "Body length"),
    body = ProtoField.bytes("sarigp.body", "Body"),
    router_id = ProtoField.uint32("sarigp.router_id", "Router ID"),
    seq = ProtoField.uint32("sarigp.seq", "Sequence number"),
    sent_at = ProtoField.uint64("sarigp.sent_at_us", "Sent at (µs, sender's clock)"),
    reply = ProtoField.uint8("sarigp.probe.reply", "Reply", base.DEC, { [0] = "probe", [1] = "answer" }),
    count = ProtoField.uint32("sarigp.count", "Count"),
    nb_router = ProtoField.uint32("sarigp.neighbor.router_id", "Neighbour router ID"),
    nb_seq = ProtoField.uint32("sarigp.neighbor.seq", "Echoed sequence number"),
    nb_sent = ProtoField.uint64("sarigp.neighbor.sent_at_us", "Echoed sent at (µs)"),
    nb_held = ProtoField.uint64("sarigp.neighbor.held_us", "Held (µs)"),
    origin = ProtoField.uint32("sarigp.lsa.origin", "Origin router ID"),
    part = ProtoField.uint16("sarigp.lsa.part", "Part"),
    lsa_seq = ProtoField.uint32("sarigp.lsa.seq", "LSA sequence number"),
    age = ProtoField.uint16("sarigp.lsa.age", "Age (s)"),
    kind = ProtoField.uint32("sarigp.lsa.kind", "Body kind", base.DEC, LSA_KINDS),
    address = ProtoField.ipv6("sarigp.router.address", "Router address"),
    link_nb = ProtoField.uint32("sarigp.link.neighbor", "Link to router"),
    link_cost = ProtoField.uint32("sarigp.link.cost", "Cost"),
    prefix = ProtoField.ipv6("sarigp.prefix", "Prefix"),
    prefix_len = ProtoField.uint8("sarigp.prefix.len", "Prefix length"),
    name_len = ProtoField.uint32("sarigp.service.name_len", "Name length"),
    ipaddr = ProtoField.uint32("sarigp.ipaddr.variant", "Address family", base.DEC, IPADDR),
    instance = ProtoField.ipv6("sarigp.service.instance", "Instance"),
    instance4 = ProtoField.ipv4("sarigp.service.instance.v4", "Instance"),
    c_variant = ProtoField.uint32("sarigp.constraint.variant", "Constraint", base.DEC, CONSTRAINT_VARIANTS),
    c_kind = ProtoField.uint8("sarigp.constraint.kind", "Constraint type"),
    c_value = ProtoField.bytes("sarigp.constraint.value", "Value"),
    mode_variant = ProtoField.uint32("sarigp.constraint.mode_variant", "Mode variant"),
    policy_variant = ProtoField.uint32("sarigp.constraint.policy_variant", "Policy variant"),
    lifetime = ProtoField.uint32("sarigp.service.lifetime_s", "Lifetime (s)"),
    anycast = ProtoField.ipv6("sarigp.appmetrics.anycast", "Anycast address"),
    anycast4 = ProtoField.ipv4("sarigp.appmetrics.anycast.v4", "Anycast address"),
    metrics_len = ProtoField.uint32("sarigp.appmetrics.len", "App-Metrics length"),
    sticky_service = ProtoField.ipv6("sarigp.sticky.service_id", "Sticky service ID"),
    sticky_service4 = ProtoField.ipv4("sarigp.sticky.service_id.v4", "Sticky service ID"),
    sticky_key = ProtoField.uint32("sarigp.sticky.key", "Key", base.DEC, STICKY_KEYS),
    flow_label = ProtoField.uint32("sarigp.sticky.flow_label", "Flow label", base.HEX),
    ue = ProtoField.ipv6("sarigp.sticky.ue", "UE address"),
    ue4 = ProtoField.ipv4("sarigp.sticky.ue.v4", "UE address"),
    egress = ProtoField.ipv6("sarigp.sticky.egress", "Sticky egress"),
    egress4 = ProtoField.ipv4("sarigp.sticky.egress.v4", "Sticky egress"),
    remaining = ProtoField.uint32("sarigp.sticky.remaining_s", "Remaining (s)"),
    ack_kind = ProtoField.uint32("sarigp.ack.kind", "Body kind", base.DEC, LSA_KINDS),
}
sarigp.fields = {}
for _, f in pairs(gp) do
    sarigp.fields[#sarigp.fields + 1] = f
end
local igp_ex = new_experts(sarigp, "sarigp", "SAR IGP message")

-- A postcard reader over tvb from `off`, failing into `tree`.
local Reader = {}
Reader.__index = Reader

local function reader(tvb, off, stop, tree)
    return setmetatable({ tvb = tvb, off = off, stop = stop, tree = tree }, Reader)
end

function Reader:range(n, what)
    if self.off + n > self.stop then
        local have = self.stop - self.off
        fail(self.tree, igp_ex, clamp(self.tvb, self.off, math.max(have, 1)), what .. ": truncated")
    end
    local r = self.tvb(self.off, n)
    self.off = self.off + n
    return r
end

function Reader:u8(what)
    local r = self:range(1, what)
    return r:uint(), r
end

-- An unsigned varint of at most `bits` (16, 32 or 64). Returns (value as a
-- number, or a UInt64 for 64 bits), range.
function Reader:varint(bits, what)
    local max = ({ [16] = 3, [32] = 5, [64] = 10 })[bits]
    local start = self.off
    local v = bits == 64 and UInt64(0) or 0
    for i = 0, max - 1 do
        local b = self:u8(what)
        local low = band(b, 0x7f)
        if i == max - 1 then
            -- The last octet may carry only the bits left of the type.
            local left = bits - 7 * i
            if b >= 0x80 or rshift(low, left) ~= 0 then
                fail(self.tree, igp_ex, self.tvb(start, self.off - start), what .. ": varint overflows u" .. bits)
            end
        end
        if bits == 64 then
            v = v + UInt64(low):lshift(7 * i)
        else
            v = v + low * 2 ^ (7 * i)
        end
        if b < 0x80 then
            return v, self.tvb(start, self.off - start)
        end
    end
end

-- A count of items (a usize varint), no more than could fit in what is left.
function Reader:count(what)
    local n, r = self:varint(64, what)
    local left = self.stop - self.off
    if n > UInt64(left) then
        fail(self.tree, igp_ex, r, what .. ": count " .. tostring(n) .. " larger than the body")
    end
    return n:tonumber(), r
end

function Reader:varint_field(t, field, bits, what)
    local v, r = self:varint(bits, what)
    t:add(field, r, v)
    return v, r
end

-- An IpAddr: variant then 4 or 16 octets; adds to f6/f4. Returns its text.
function Reader:ipaddr(t, f6, f4, what)
    local start = self.off
    local variant, vr = self:varint(32, what)
    if variant == 0 then
        local a = self:range(4, what)
        local item = t:add(f4, self.tvb(start, self.off - start), a:ipv4())
        item:add(gp.ipaddr, vr, variant)
        return tostring(a:ipv4())
    elseif variant == 1 then
        local a = self:range(16, what)
        local item = t:add(f6, self.tvb(start, self.off - start), a:ipv6())
        item:add(gp.ipaddr, vr, variant)
        return tostring(a:ipv6())
    end
    fail(self.tree, igp_ex, vr, what .. ": IpAddr variant " .. variant .. ", not 0 or 1")
end

local function cap(t, n, max, r, what)
    if n > max then
        fail(t, igp_ex, r, string.format("%d %s, over the cap of %d", n, what, max))
    end
end

local function igp_probe(rd, t)
    local rid = rd:varint_field(t, gp.router_id, 32, "router_id")
    local seq = rd:varint_field(t, gp.seq, 32, "seq")
    rd:varint_field(t, gp.sent_at, 64, "sent_at_us")
    local reply, rr = rd:u8("reply")
    t:add(gp.reply, rr)
    if reply > 1 then
        fail(t, igp_ex, rr, "bool " .. reply .. ", not 0 or 1")
    end
    return string.format("probe %s from %d seq %d", reply == 1 and "answer" or "request", rid, seq)
end

local function igp_hello(rd, t)
    local rid = rd:varint_field(t, gp.router_id, 32, "router_id")
    local seq = rd:varint_field(t, gp.seq, 32, "seq")
    rd:varint_field(t, gp.sent_at, 64, "sent_at_us")
    local n, nr = rd:count("neighbors")
    t:add(gp.count, nr, n):set_text("Neighbours: " .. n)
    cap(t, n, 64, nr, "neighbours")
    local ids = {}
    for _ = 1, n do
        local start = rd.off
        local st = t:add(rd.tvb(start, 0), "Neighbour")
        local id = rd:varint_field(st, gp.nb_router, 32, "neighbour router_id")
        rd:varint_field(st, gp.nb_seq, 32, "neighbour seq")
        rd:varint_field(st, gp.nb_sent, 64, "neighbour sent_at_us")
        rd:varint_field(st, gp.nb_held, 64, "neighbour held_us")
        st:set_len(rd.off - start)
        st:append_text(" " .. id)
        ids[#ids + 1] = tostring(id)
    end
    return string.format("hello from %d seq %d neighbours [%s]", rid, seq, table.concat(ids, ","))
end

-- Constraints (serde of wire::rosa::Constraints): a count of enum values.
local function igp_constraints(rd, t)
    local n, nr = rd:count("constraints")
    t:add(gp.count, nr, n):set_text("Constraints: " .. n)
    for _ = 1, n do
        local start = rd.off
        local st = t:add(rd.tvb(start, 0), "Constraint")
        local variant, vr = rd:varint_field(st, gp.c_variant, 32, "constraint variant")
        if variant == 0 then
            local m, mr = rd:varint(32, "mode")
            st:add(gp.mode_variant, mr, m)
            local mode
            if m <= 1 then
                mode = m
            elseif m == 2 then
                mode = rd:u8("mode")
                st:add_tvb_expert_info(igp_ex.unknown, mr, "Unknown mode " .. mode)
            else
                fail(st, igp_ex, mr, "Mode variant " .. m)
            end
            local p, pr = rd:varint(32, "policy")
            st:add(gp.policy_variant, pr, p)
            local policy
            if p <= 5 then
                policy = p
            elseif p == 6 then
                policy = rd:u8("policy")
                st:add_tvb_expert_info(igp_ex.unknown, pr, "Unknown policy " .. policy)
            else
                fail(st, igp_ex, pr, "Policy variant " .. p)
            end
            st:add(of.mode, mr, mode)
            st:add(of.policy, pr, policy)
            st:append_text(": " .. lookup(MODES, mode) .. "/" .. lookup(POLICIES, policy))
        elseif variant >= 1 and variant <= 5 then
            local f = ({ of.capability, of.load, of.latency, of.preference, of.lifetime })[variant]
            local v = rd:varint_field(st, f, 32, CONSTRAINT_VARIANTS[variant])
            st:append_text(": " .. CONSTRAINT_VARIANTS[variant] .. " " .. v)
        elseif variant == 6 then
            local kind, kr = rd:u8("constraint kind")
            st:add(gp.c_kind, kr)
            local len = rd:count("constraint value")
            if len > 0 then
                st:add(gp.c_value, rd:range(len, "constraint value"))
            end
            st:add_tvb_expert_info(igp_ex.unknown, kr, "Unknown constraint type " .. kind)
        else
            fail(st, igp_ex, vr, "Constraint variant " .. variant)
        end
        st:set_len(rd.off - start)
    end
end

local function igp_name(rd, t)
    local len, lr = rd:count("service name")
    t:add(gp.name_len, lr, len)
    local start = rd.off
    local r = len > 0 and rd:range(len, "service name") or rd.tvb(start, 0)
    local name = add_service_name(t, igp_ex, r, rd.tvb, start, len)
    t:add(of.service, rd.tvb(lr:offset(), rd.off - lr:offset()), name):set_generated()
    return name
end

local function igp_lsa(rd, t)
    local origin = rd:varint_field(t, gp.origin, 32, "origin")
    rd:varint_field(t, gp.part, 16, "part")
    local seq = rd:varint_field(t, gp.lsa_seq, 32, "seq")
    local age, ar = rd:varint_field(t, gp.age, 16, "age")
    if age > 3600 then
        fail(t, igp_ex, ar, "age " .. age .. " over 3600 s")
    end
    local kind, kr = rd:varint_field(t, gp.kind, 32, "body kind")
    local what = {}
    if kind == 0 then
        local a = rd:range(16, "address")
        t:add(gp.address, a)
        local n, nr = rd:count("links")
        t:add(gp.count, nr, n):set_text("Links: " .. n)
        cap(t, n, 64, nr, "links")
        for _ = 1, n do
            local start = rd.off
            local st = t:add(rd.tvb(start, 0), "Link")
            local nb = rd:varint_field(st, gp.link_nb, 32, "link neighbour")
            local cost = rd:varint_field(st, gp.link_cost, 32, "link cost")
            st:set_len(rd.off - start)
            st:append_text(string.format(" to %d cost %d", nb, cost))
            what[#what + 1] = string.format("%d:%d", nb, cost)
        end
        local p, pr = rd:count("prefixes")
        t:add(gp.count, pr, p):set_text("Prefixes: " .. p)
        cap(t, p, 64, pr, "prefixes")
        for _ = 1, p do
            local start = rd.off
            local st = t:add(rd.tvb(start, 0), "Prefix")
            local pa = rd:range(16, "prefix")
            st:add(gp.prefix, pa)
            local plen, plr = rd:u8("prefix length")
            st:add(gp.prefix_len, plr)
            if plen > 128 then
                fail(st, igp_ex, plr, "prefix length " .. plen .. " over 128")
            end
            st:set_len(rd.off - start)
            st:append_text(" " .. tostring(pa:ipv6()) .. "/" .. plen)
        end
        return string.format("LSA router links of %d seq %d links [%s]", origin, seq, table.concat(what, ","))
    elseif kind == 1 then
        local n, nr = rd:count("services")
        t:add(gp.count, nr, n):set_text("Services: " .. n)
        cap(t, n, 64, nr, "services")
        for _ = 1, n do
            local start = rd.off
            local st = t:add(rd.tvb(start, 0), "Service announcement")
            local name = igp_name(rd, st)
            local inst = rd:ipaddr(st, gp.instance, gp.instance4, "instance")
            igp_constraints(rd, st)
            rd:varint_field(st, gp.lifetime, 32, "lifetime_s")
            st:set_len(rd.off - start)
            st:append_text(": " .. name .. " at " .. inst)
            what[#what + 1] = name .. "@" .. inst
        end
        return string.format("LSA services of %d seq %d [%s]", origin, seq, table.concat(what, ","))
    elseif kind == 2 then
        local n, nr = rd:count("App-Metrics entries")
        t:add(gp.count, nr, n):set_text("App-Metrics entries: " .. n)
        cap(t, n, 64, nr, "App-Metrics entries")
        for _ = 1, n do
            local start = rd.off
            local st = t:add(rd.tvb(start, 0), "App-Metrics entry")
            local a = rd:ipaddr(st, gp.anycast, gp.anycast4, "anycast")
            local len, lr = rd:count("App-Metrics")
            st:add(gp.metrics_len, lr, len)
            local moff = rd.off
            rd:range(len, "App-Metrics")
            local summary = dissect_appmetrics(rd.tvb, moff, len, st)
            st:set_len(rd.off - start)
            st:append_text(": " .. a .. " " .. summary)
            what[#what + 1] = a
        end
        return string.format("LSA App-Metrics of %d seq %d [%s]", origin, seq, table.concat(what, ","))
    elseif kind == 3 then
        local n, nr = rd:count("sticky entries")
        t:add(gp.count, nr, n):set_text("Sticky entries: " .. n)
        cap(t, n, 256, nr, "sticky entries")
        for _ = 1, n do
            local start = rd.off
            local st = t:add(rd.tvb(start, 0), "Sticky entry")
            local svc = rd:ipaddr(st, gp.sticky_service, gp.sticky_service4, "service_id")
            local key, keyr = rd:varint_field(st, gp.sticky_key, 32, "key")
            local keytext
            if key == 0 then
                local label, lr = rd:varint_field(st, gp.flow_label, 32, "flow label")
                if label > 0xfffff then
                    fail(st, igp_ex, lr, "flow label over 20 bits")
                end
                keytext = "label " .. hex(label, 5)
            elseif key == 1 then
                keytext = "UE " .. rd:ipaddr(st, gp.ue, gp.ue4, "UE")
            else
                fail(st, igp_ex, keyr, "StickyKey variant " .. key)
            end
            local eg = rd:ipaddr(st, gp.egress, gp.egress4, "egress")
            rd:varint_field(st, gp.remaining, 32, "remaining_s")
            st:set_len(rd.off - start)
            st:append_text(": " .. svc .. " " .. keytext .. " -> " .. eg)
        end
        return string.format("LSA sticky of %d seq %d (%d entries)", origin, seq, n)
    end
    fail(t, igp_ex, kr, "LsaBody variant " .. kind)
end

local function igp_ack(rd, t)
    local rid = rd:varint_field(t, gp.router_id, 32, "router_id")
    local n, nr = rd:count("acks")
    t:add(gp.count, nr, n):set_text("Acknowledged: " .. n)
    cap(t, n, 128, nr, "acks")
    local acks = {}
    for _ = 1, n do
        local start = rd.off
        local st = t:add(rd.tvb(start, 0), "LSA header")
        local origin = rd:varint_field(st, gp.origin, 32, "origin")
        local kind, kr = rd:varint_field(st, gp.ack_kind, 32, "kind")
        if not LSA_KINDS[kind] then
            fail(st, igp_ex, kr, "LsaKind variant " .. kind)
        end
        rd:varint_field(st, gp.part, 16, "part")
        local seq = rd:varint_field(st, gp.lsa_seq, 32, "seq")
        st:set_len(rd.off - start)
        st:append_text(string.format(": %d %s seq %d", origin, LSA_KINDS[kind], seq))
        acks[#acks + 1] = string.format("%d/%s/%d", origin, LSA_KINDS[kind], seq)
    end
    return string.format("LS ack from %d [%s]", rid, table.concat(acks, ","))
end

function sarigp.dissector(tvb, pinfo, root)
    if tvb:len() == 0 then
        return 0
    end
    pinfo.cols.protocol = "SAR IGP"
    local t = root:add(sarigp, tvb())
    local info = "SAR IGP"
    guarded(function()
        if tvb:len() > 16000 then
            fail(t, igp_ex, tvb(), "datagram over 16000 octets")
        end
        local rd = reader(tvb, 0, tvb:len(), t)
        local ver, vr = rd:u8("version")
        t:add(gp.version, vr)
        if ver ~= 1 then
            fail(t, igp_ex, vr, "version " .. ver .. ", not 1")
        end
        local ty, tr = rd:u8("msg_type")
        t:add(gp.msg_type, tr)
        local auth, authr = rd:u8("auth")
        local ai = t:add(gp.auth, authr)
        local signed = ""
        if auth == 1 then
            local k = rd:range(1, "key_id")
            ai:add(gp.auth_key, k)
            ai:add(gp.auth_tag, rd:range(16, "tag"))
            ai:set_len(18)
            signed = " (key " .. k:uint() .. ")"
        elseif auth ~= 0 then
            fail(t, igp_ex, authr, "Option tag " .. auth .. ", not 0 or 1")
        end
        local blen, blr = rd:count("body")
        t:add(gp.body_len, blr, blen)
        local boff = rd.off
        rd:range(blen, "body")
        info = "SAR IGP " .. lookup(IGP_TYPES, ty)
        local bt = t:add(tvb(boff, blen), "Body: " .. lookup(IGP_TYPES, ty))
        local body = reader(tvb, boff, boff + blen, bt)
        if ty == 1 then
            info = igp_hello(body, bt)
        elseif ty == 2 then
            info = igp_lsa(body, bt)
        elseif ty == 3 then
            info = igp_ack(body, bt)
        elseif ty == 4 then
            info = igp_probe(body, bt)
        else
            body.off = boff + blen
            if blen > 0 then
                bt:add(gp.body, tvb(boff, blen))
            end
            bt:add_tvb_expert_info(igp_ex.unknown, tr, "Unknown IGP message type " .. ty)
        end
        if body.off ~= boff + blen then
            fail(bt, igp_ex, tvb(body.off, boff + blen - body.off), "octets after the body")
        end
        if rd.off ~= tvb:len() then
            fail(t, igp_ex, tvb(rd.off), "octets after the envelope")
        end
        info = info .. signed
        t:append_text(": " .. info)
    end)
    pinfo.cols.info = info
    return tvb:len()
end

---------------------------------------------------------------------------
-- mSLP: RFC 3528 on top of Wireshark's SLP (srvloc) dissector
---------------------------------------------------------------------------

local mslp = Proto("mslp", "Mesh-enhanced SLP (RFC 3528, svcroute)")
local AE_TYPES = { [1] = "selective", [2] = "complete" }
local FWD_IDS = { [1] = "RqstFwd", [2] = "Fwded" }
local EXT_IDS = { [6] = "MeshFwd" }
local mf = {
    version = ProtoField.uint8("mslp.version", "Version"),
    ["function"] = ProtoField.uint8("mslp.function", "Function", base.DEC, { [12] = "AntiEtrpRqst" }),
    length = ProtoField.uint24("mslp.length", "Packet length"),
    flags = ProtoField.uint16("mslp.flags", "Flags", base.HEX),
    overflow = ProtoField.bool("mslp.flags.overflow", "OVERFLOW", 16, nil, 0x8000),
    fresh = ProtoField.bool("mslp.flags.fresh", "FRESH", 16, nil, 0x4000),
    mcast = ProtoField.bool("mslp.flags.mcast", "REQUEST MCAST", 16, nil, 0x2000),
    flags_reserved = ProtoField.uint16("mslp.flags.reserved", "Reserved", base.HEX, nil, 0x1fff),
    next_ext = ProtoField.uint24("mslp.next_ext", "Next extension offset"),
    xid = ProtoField.uint16("mslp.xid", "XID"),
    lang_len = ProtoField.uint16("mslp.lang_len", "Language tag length"),
    lang = ProtoField.string("mslp.lang", "Language tag"),
    ae_type = ProtoField.uint16("mslp.antientropy.type", "Anti-entropy type", base.DEC, AE_TYPES),
    ae_count = ProtoField.uint16("mslp.antientropy.count", "Accept ID entries"),
    accept_ts = ProtoField.uint64("mslp.accept.timestamp", "Accept timestamp (µs since 1900)"),
    accept_time = ProtoField.absolute_time("mslp.accept.time", "Accept time", base.UTC),
    url_len = ProtoField.uint16("mslp.accept.url_len", "Accept DA URL length"),
    url = ProtoField.string("mslp.accept.url", "Accept DA URL"),
    ext_id = ProtoField.uint16("mslp.ext.id", "Extension ID", base.HEX, EXT_IDS),
    ext_next = ProtoField.uint24("mslp.ext.next", "Next extension offset"),
    ext_data = ProtoField.bytes("mslp.ext.data", "Extension data"),
    fwd_id = ProtoField.uint8("mslp.meshfwd.fwd_id", "Fwd-ID", base.DEC, FWD_IDS),
    version_ts = ProtoField.uint64("mslp.meshfwd.version", "Version timestamp (µs since 1900)"),
    version_time = ProtoField.absolute_time("mslp.meshfwd.version_time", "Version time", base.UTC),
}
mslp.fields = {}
for _, f in pairs(mf) do
    mslp.fields[#mslp.fields + 1] = f
end
local mslp_ex = new_experts(mslp, "mslp", "mSLP message")

local udpport = DissectorTable.get("udp.port")
local tcpport = DissectorTable.get("tcp.port")
local builtin_srvloc = udpport:get_dissector(427)

-- An accept ID entry at off: timestamp u64, URL length u16, URL.
local function accept_id(t, tvb, off, stop)
    local function cut(what)
        fail(t, mslp_ex, tvb(off, math.max(stop - off, 0)), what .. " cut short")
    end
    if off + 10 > stop then
        cut("accept ID entry")
    end
    local ulen = tvb(off + 8, 2):uint()
    if off + 10 + ulen > stop then
        cut("accept DA URL")
    end
    local st = t:add(tvb(off, 10 + ulen), "Accept ID")
    local ts = tvb(off, 8):uint64()
    st:add(mf.accept_ts, tvb(off, 8))
    if ts ~= UInt64(0) then
        st:add(mf.accept_time, tvb(off, 8), ntp_us_to_nstime(ts)):set_generated()
    end
    st:add(mf.url_len, tvb(off + 8, 2))
    local url = ulen > 0 and tvb(off + 10, ulen):string() or ""
    if ulen > 0 then
        st:add(mf.url, tvb(off + 10, ulen))
    end
    st:append_text(": " .. (url ~= "" and url or "(none)") .. " at " .. tostring(ts))
    return off + 10 + ulen
end

-- The extension chain of a message in tvb, starting at `first`.
local function slp_extensions(tvb, pinfo, root, first, hdr_end)
    local t = root:add(mslp, clamp(tvb, first), "Mesh-enhanced SLP extensions")
    local notes = {}
    guarded(function()
        local len = tvb:len()
        local off = first
        if off < hdr_end or off >= len then
            fail(t, mslp_ex, tvb(7, 3), "next extension offset " .. off .. " outside the message")
        end
        while true do
            if off + 5 > len then
                fail(t, mslp_ex, tvb(math.min(off, len - 1)), "extension header past the message")
            end
            local id, nxt = tvb(off, 2):uint(), tvb(off + 2, 3):uint()
            local stop = len
            if nxt ~= 0 then
                if nxt < off + 5 or nxt + 5 > len then
                    fail(t, mslp_ex, tvb(off + 2, 3), "next extension offset " .. nxt .. " out of order or past the end")
                end
                stop = nxt
            end
            local st = t:add(tvb(off, stop - off), "Extension " .. (EXT_IDS[id] or hex(id, 4)))
            st:add(mf.ext_id, tvb(off, 2))
            st:add(mf.ext_next, tvb(off + 2, 3))
            local d = off + 5
            if id == 6 then
                if d + 9 > stop then
                    fail(st, mslp_ex, tvb(d, stop - d), "MeshFwd cut short")
                end
                local fwd = tvb(d, 1):uint()
                st:add(mf.fwd_id, tvb(d, 1))
                if not FWD_IDS[fwd] then
                    st:add_tvb_expert_info(mslp_ex.unknown, tvb(d, 1), "Unknown Fwd-ID " .. fwd)
                end
                local vts = tvb(d + 1, 8):uint64()
                st:add(mf.version_ts, tvb(d + 1, 8))
                if vts ~= UInt64(0) then
                    st:add(mf.version_time, tvb(d + 1, 8), ntp_us_to_nstime(vts)):set_generated()
                end
                local e = accept_id(st, tvb, d + 9, stop)
                if e ~= stop then
                    fail(st, mslp_ex, tvb(e, stop - e), "octets after the MeshFwd accept ID")
                end
                st:append_text(": " .. lookup(FWD_IDS, fwd))
                notes[#notes + 1] = "MeshFwd " .. lookup(FWD_IDS, fwd)
            else
                if stop > d then
                    st:add(mf.ext_data, tvb(d, stop - d))
                end
                if id >= 0x4000 and id <= 0x7fff then
                    fail(st, mslp_ex, tvb(off, 2), "unknown mandatory extension " .. hex(id, 4)
                        .. " (OPTION_NOT_UNDERSTOOD)")
                end
                st:add_tvb_expert_info(mslp_ex.unknown, tvb(off, 2), "Unknown extension " .. hex(id, 4))
            end
            if nxt == 0 then
                break
            end
            off = nxt
        end
    end)
    return table.concat(notes, " ")
end

-- AntiEtrpRqst (function 12): header and body; the built-in knows neither.
local function anti_etrp(tvb, pinfo, root)
    pinfo.cols.protocol = "mSLP"
    local t = root:add(mslp, tvb(), "Mesh-enhanced SLP AntiEtrpRqst")
    local info = "AntiEtrpRqst"
    guarded(function()
        need(t, mslp_ex, tvb, 0, 14, "SLP header")
        t:add(mf.version, tvb(0, 1))
        t:add(mf["function"], tvb(1, 1))
        t:add(mf.length, tvb(2, 3))
        if tvb(2, 3):uint() ~= tvb:len() then
            fail(t, mslp_ex, tvb(2, 3), "length " .. tvb(2, 3):uint() .. " but " .. tvb:len() .. " octets")
        end
        local fi = t:add(mf.flags, tvb(5, 2))
        fi:add(mf.overflow, tvb(5, 2))
        fi:add(mf.fresh, tvb(5, 2))
        fi:add(mf.mcast, tvb(5, 2))
        fi:add(mf.flags_reserved, tvb(5, 2))
        if band(tvb(5, 2):uint(), 0x1fff) ~= 0 then
            fail(t, mslp_ex, tvb(5, 2), "reserved flag bits set")
        end
        local neo = tvb(7, 3):uint()
        t:add(mf.next_ext, tvb(7, 3))
        t:add(mf.xid, tvb(10, 2))
        local ll = tvb(12, 2):uint()
        t:add(mf.lang_len, tvb(12, 2))
        need(t, mslp_ex, tvb, 14, ll, "language tag")
        local lang = ll > 0 and tvb(14, ll):string() or ""
        if ll > 0 then
            t:add(mf.lang, tvb(14, ll))
        end
        local first, rest = lang:match("^(%a+)(.*)$")
        local lang_ok = first and #first <= 8
        for part in (rest or ""):gmatch("[^-]*") do
            if part ~= "" and (#part > 8 or not part:match("^%w+$")) then
                lang_ok = false
            end
        end
        if not lang_ok or (rest or ""):find("%-%-") or (rest or ""):find("%-$")
            or ((rest or "") ~= "" and (rest or ""):sub(1, 1) ~= "-") then
            fail(t, mslp_ex, clamp(tvb, 12, 2 + ll), "language tag " .. lang .. " is not RFC 1766")
        end
        local hdr_end = 14 + ll
        local stop = neo ~= 0 and neo or tvb:len()
        if stop > tvb:len() or stop < hdr_end then
            fail(t, mslp_ex, tvb(7, 3), "next extension offset out of the message")
        end
        need(t, mslp_ex, tvb, hdr_end, 4, "AntiEtrpRqst")
        local ty, count = tvb(hdr_end, 2):uint(), tvb(hdr_end + 2, 2):uint()
        t:add(mf.ae_type, tvb(hdr_end, 2))
        if not AE_TYPES[ty] then
            t:add_tvb_expert_info(mslp_ex.unknown, tvb(hdr_end, 2), "Unknown anti-entropy type " .. ty)
        end
        t:add(mf.ae_count, tvb(hdr_end + 2, 2))
        local off = hdr_end + 4
        for _ = 1, count do
            off = accept_id(t, tvb, off, stop)
        end
        if off ~= stop then
            fail(t, mslp_ex, tvb(off, stop - off), "octets after the accept ID entries")
        end
        info = string.format("AntiEtrpRqst %s, %d accept IDs, XID %d", lookup(AE_TYPES, ty), count,
            tvb(10, 2):uint())
        t:append_text(": " .. info)
        if neo ~= 0 then
            local notes = slp_extensions(tvb, pinfo, root, neo, hdr_end)
            if #notes > 0 then
                info = info .. " [" .. notes .. "]"
            end
        end
    end)
    pinfo.cols.info = info
end

-- One SLP message (a UDP datagram or one TCP PDU).
local function slp_message(tvb, pinfo, root)
    if tvb:len() >= 2 and tvb(0, 1):uint() == 2 and tvb(1, 1):uint() == 12 then
        anti_etrp(tvb, pinfo, root)
        return tvb:len()
    end
    call_builtin(builtin_srvloc, tvb, pinfo, root)
    if tvb:len() >= 14 and tvb(0, 1):uint() == 2 and tvb(7, 3):uint() ~= 0 then
        local notes = slp_extensions(tvb, pinfo, root, tvb(7, 3):uint(), 14 + tvb(12, 2):uint())
        if #notes > 0 then
            pinfo.cols.info:append(" [" .. notes .. "]")
        end
    end
    return tvb:len()
end

local function slp_pdu_len(tvb, pinfo, off)
    local len
    if tvb(off, 1):uint() == 2 then
        len = tvb(off + 2, 3):uint()
    else
        len = tvb(off + 2, 2):uint() -- SLPv1
    end
    if len < 14 then
        -- Not even a header: take the rest as one (malformed) message
        -- rather than loop on it.
        return tvb:len() - off
    end
    return len
end

function mslp.dissector(tvb, pinfo, root)
    if tvb:len() == 0 then
        return 0
    end
    if pinfo.port_type == 2 then -- TCP: one message per PDU
        dissect_tcp_pdus(tvb, root, 5, slp_pdu_len, slp_message)
        return tvb:len()
    end
    return slp_message(tvb, pinfo, root)
end

---------------------------------------------------------------------------
-- Registration
---------------------------------------------------------------------------

ipproto:add(253, gff)
if builtin_dstopts then
    ipproto:add(60, dstopts)
end
udpport:add(7470, sarigp)
if builtin_srvloc then
    udpport:add(427, mslp)
    tcpport:add(427, mslp)
end

-- UDP 7471: a SAG hands a ROSA packet to another domain's SAG inside UDP,
-- the whole IPv6 packet as the payload (docs/sag.md).
local sagencap = Proto("sagencap", "SAG hand-over in UDP 7471 (svcroute)")
function sagencap.dissector(tvb, pinfo, root)
    root:add(sagencap, tvb(), "SAG hand-over: the IPv6 packet follows")
    return call_builtin(Dissector.get("ipv6"), tvb, pinfo, root)
end
udpport:add(7471, sagencap)

-- NSH next protocol 0xFE: an HTTP message follows (SPEC §1.4 [ext]).
local ok, nsh_next = pcall(DissectorTable.get, "nsh.next_proto")
if ok and nsh_next then
    nsh_next:add(0xfe, Dissector.get("http"))
end
