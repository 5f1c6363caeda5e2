"""Python client of a chorus node: ZeroMQ (pyzmq) + FlatBuffers, with the message code
generated from chorus's schemas by `flatc --python` (the build writes it to build/python).

    client = ChorusClient("tcp://127.0.0.1:5555")
    prompt = client.create_block("prompt")
    client.wait(client.forward(prompt, text="<|im_start|>user\\nHi<|im_end|>\\n"))
    answer = client.create_block("answer")
    for event in client.events(client.generate(answer, view=[prompt],
                                               prefill_text="<|im_start|>assistant\\n")):
        print(event.get("text", ""), end="")
"""
import itertools

import flatbuffers
import zmq
from chorus.wire import (BlockInfo, Candidate, ClearBlock, CreateBlock, Envelope, Error, ForkBlock, Forward,
                         FreeBlock, Generate, MergeBlocks, Payload, Probe, ProbeResult, RequestFinished, Sampling,
                         SnapshotView, Stop, Submitted, TokenEvent, ViewSnapshot)

FINISH_REASONS = ["completed", "max_tokens", "stop_token", "stop_string", "end_of_generation", "context_full",
                  "error"]


# schemas/common.fbs ErrorCode, by value.
ERROR_CODES = ["ok", "invalid_argument", "io", "bad_format", "unsupported", "not_found", "out_of_range",
               "out_of_memory", "internal", "withdrawn"]


class ChorusError(RuntimeError):
    """The node refused a command; the message says why, `code` says what kind of failure it is
    (a name of ERROR_CODES: "out_of_memory" when the KV pool could never hold the request)."""

    def __init__(self, message, code="internal"):
        super().__init__(message)
        self.code = code


def _ints(builder, values):
    builder.StartVector(4, len(values), 4)
    for v in reversed(values):
        builder.PrependInt32(v)
    return builder.EndVector()


def _floats(table, name):
    return [getattr(table, name)(i) for i in range(getattr(table, name + "Length")())]


def envelope(payload_type, build_payload, request_id=0):
    """Frames one message: build_payload(builder) returns the payload table's offset."""
    b = flatbuffers.Builder(256)
    payload = build_payload(b)
    Envelope.Start(b)
    Envelope.AddVersion(b, 1)
    Envelope.AddRequestId(b, request_id)
    Envelope.AddPayloadType(b, payload_type)
    Envelope.AddPayload(b, payload)
    b.Finish(Envelope.End(b), file_identifier=b"CHR1")
    return bytes(b.Output())


def _block_info(x):
    return {"block": x.Block(), "name": (x.Name() or b"").decode(), "tokens": x.Tokens(), "cached": x.Cached()}


def decode(frame):
    """One frame from the node as a dict: {"kind": ..., ...}."""
    env = Envelope.Envelope.GetRootAs(frame, 0)
    kind, table = env.PayloadType(), env.Payload()
    if kind == Payload.Payload.Error:
        e = Error.Error()
        e.Init(table.Bytes, table.Pos)
        return {"kind": "Error", "code": e.Code(), "message": (e.Message() or b"").decode()}
    if kind == Payload.Payload.BlockInfo:
        x = BlockInfo.BlockInfo()
        x.Init(table.Bytes, table.Pos)
        return dict(kind="BlockInfo", **_block_info(x))
    if kind == Payload.Payload.ViewSnapshot:
        x = ViewSnapshot.ViewSnapshot()
        x.Init(table.Bytes, table.Pos)
        return {"kind": "ViewSnapshot", "blocks": [_block_info(x.Blocks(i)) for i in range(x.BlocksLength())]}
    if kind == Payload.Payload.Submitted:
        x = Submitted.Submitted()
        x.Init(table.Bytes, table.Pos)
        return {"kind": "Submitted", "request": x.Request()}
    if kind == Payload.Payload.TokenEvent:
        x = TokenEvent.TokenEvent()
        x.Init(table.Bytes, table.Pos)
        return {"kind": "TokenEvent", "request": x.Request(), "token": x.Token(),
                "text": (x.Text() or b"").decode("utf-8", "replace")}
    if kind == Payload.Payload.ProbeResult:
        x = ProbeResult.ProbeResult()
        x.Init(table.Bytes, table.Pos)
        return {"kind": "ProbeResult", "request": x.Request(), "probabilities": _floats(x, "Probabilities")}
    if kind == Payload.Payload.RequestFinished:
        x = RequestFinished.RequestFinished()
        x.Init(table.Bytes, table.Pos)
        return {"kind": "RequestFinished", "request": x.Request(), "reason": FINISH_REASONS[x.Reason()],
                "error": (x.Error() or b"").decode()}
    return {"kind": "unknown", "type": kind}


def _key_lines(path):
    """The lines of a chorus key file without blanks and comments (a line starting with '#'; '#' may
    be inside a key, never its first character)."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] == "#":
                continue
            out.append(line.split())
    return out


def read_curve_keys(path):
    """(public, secret) Z85 keys of a NAME.key file written by `chorus keygen`."""
    fields = {f[0]: f[1] for f in _key_lines(path) if len(f) == 2 and f[0] in ("public", "secret")}
    if set(fields) != {"public", "secret"}:
        raise ValueError("%s: not a chorus key file (`public KEY` and `secret KEY` lines)" % path)
    return fields["public"], fields["secret"]


def read_curve_public(path_or_key):
    """A public Z85 key: the key itself (40 characters) or a NAME.pub file."""
    if len(path_or_key) == 40 and not path_or_key.endswith(".pub"):
        return path_or_key
    keys = [f[0] for f in _key_lines(path_or_key)]
    if len(keys) != 1:
        raise ValueError("%s: expected one public key, found %d" % (path_or_key, len(keys)))
    return keys[0]


def curve_client(sock, server_key, client_keys):
    """Makes a pyzmq socket a CURVE client of a node (before connect): server_key is the node's
    NAME.pub (or key), client_keys this client's NAME.key (or a (public, secret) pair)."""
    public, secret = read_curve_keys(client_keys) if isinstance(client_keys, str) else client_keys
    sock.curve_serverkey = read_curve_public(server_key).encode()
    sock.curve_publickey = public.encode()
    sock.curve_secretkey = secret.encode()


class ChorusClient:
    """One connection to a node port. For a node with a CURVE key (`chorus node --curve-key`),
    give server_key (its NAME.pub) and client_keys (this client's NAME.key, allowed on the node);
    a node that refuses the key never answers, so commands then time out (timeout_ms)."""

    def __init__(self, endpoint, timeout_ms=60000, server_key=None, client_keys=None):
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
        if server_key or client_keys:
            curve_client(self.sock, server_key, client_keys)
        self.sock.connect(endpoint)
        self.ids = itertools.count(1)
        self.pending = []  # events received while waiting for something else

    def close(self):
        self.sock.close()

    def raw(self, frame):
        """Sends any bytes as one frame and returns the decoded reply (for tests of bad frames)."""
        self.sock.send(frame)
        return decode(self.sock.recv())

    def _command(self, payload_type, build):
        self.sock.send(envelope(payload_type, build, next(self.ids)))
        while True:
            reply = decode(self.sock.recv())
            if reply["kind"] in ("TokenEvent", "ProbeResult", "RequestFinished"):
                self.pending.append(reply)
                continue
            if reply["kind"] == "Error":
                c = reply["code"]
                raise ChorusError(reply["message"], ERROR_CODES[c] if 0 <= c < len(ERROR_CODES) else "internal")
            return reply

    def create_block(self, name="", program=0):
        """A new empty block; with `program`, it joins that registered program (paused and restored with it)."""
        def build(b):
            n = b.CreateString(name)
            CreateBlock.Start(b)
            CreateBlock.AddName(b, n)
            CreateBlock.AddProgram(b, program)
            return CreateBlock.End(b)
        return self._command(Payload.Payload.CreateBlock, build)["block"]

    def _on_block(self, table, payload, block):
        def build(b):
            table.Start(b)
            table.AddBlock(b, block)
            return table.End(b)
        return self._command(payload, build)

    def free_block(self, block):
        """Frees a block (refused while a request holds it)."""
        self._on_block(FreeBlock, Payload.Payload.FreeBlock, block)

    def clear_block(self, block):
        """Drops a block's tokens and KV; the block stays. Returns its BlockInfo."""
        return self._on_block(ClearBlock, Payload.Payload.ClearBlock, block)

    def merge_blocks(self, a, b_, name=""):
        """A new block equivalent to [a, b_], sharing their KV pages. Returns its BlockInfo."""
        def build(b):
            n = b.CreateString(name)
            MergeBlocks.Start(b)
            MergeBlocks.AddA(b, a)
            MergeBlocks.AddB(b, b_)
            MergeBlocks.AddName(b, n)
            return MergeBlocks.End(b)
        return self._command(Payload.Payload.MergeBlocks, build)

    def fork_block(self, block, tokens, name=""):
        """A new block holding the first `tokens` tokens of `block` (copy-on-write). Returns its BlockInfo."""
        def build(b):
            n = b.CreateString(name)
            ForkBlock.Start(b)
            ForkBlock.AddBlock(b, block)
            ForkBlock.AddTokens(b, tokens)
            ForkBlock.AddName(b, n)
            return ForkBlock.End(b)
        return self._command(Payload.Payload.ForkBlock, build)

    def snapshot_view(self, view):
        """Each block of `view`, in order, as it is now: [{"block", "name", "tokens", "cached"}, ...]
        (a reader of the view sees the cached tokens)."""
        def build(b):
            v = _ints(b, list(view))
            SnapshotView.Start(b)
            SnapshotView.AddView(b, v)
            return SnapshotView.End(b)
        return self._command(Payload.Payload.SnapshotView, build)["blocks"]

    def forward(self, block, tokens=(), text="", view=()):
        def build(b):
            v, t = _ints(b, list(view)), _ints(b, list(tokens))
            s = b.CreateString(text)
            Forward.Start(b)
            Forward.AddView(b, v)
            Forward.AddWriteTo(b, block)
            Forward.AddTokens(b, t)
            Forward.AddText(b, s)
            return Forward.End(b)
        return self._command(Payload.Payload.Forward, build)["request"]

    def generate(self, block, view=(), prefill=(), prefill_text="", max_tokens=32, temperature=0.0, seed=0,
                 stop_strings=()):
        def build(b):
            v, p = _ints(b, list(view)), _ints(b, list(prefill))
            pt = b.CreateString(prefill_text)
            strs = [b.CreateString(s) for s in stop_strings]
            b.StartVector(4, len(strs), 4)
            for s in reversed(strs):
                b.PrependUOffsetTRelative(s)
            strings = b.EndVector()
            Sampling.Start(b)
            Sampling.AddTemperature(b, temperature)
            Sampling.AddSeed(b, seed)
            sampling = Sampling.End(b)
            Stop.Start(b)
            Stop.AddStrings(b, strings)
            Stop.AddMaxTokens(b, max_tokens)
            stop = Stop.End(b)
            Generate.Start(b)
            Generate.AddView(b, v)
            Generate.AddWriteTo(b, block)
            Generate.AddPrefill(b, p)
            Generate.AddSampling(b, sampling)
            Generate.AddStop(b, stop)
            Generate.AddPrefillText(b, pt)
            return Generate.End(b)
        return self._command(Payload.Payload.Generate, build)["request"]

    def probe(self, view, question_text, candidates):
        def build(b):
            v = _ints(b, list(view))
            q = b.CreateString(question_text)
            cands = []
            for c in candidates:
                t = _ints(b, list(c))
                Candidate.Start(b)
                Candidate.AddTokens(b, t)
                cands.append(Candidate.End(b))
            b.StartVector(4, len(cands), 4)
            for c in reversed(cands):
                b.PrependUOffsetTRelative(c)
            cv = b.EndVector()
            Probe.Start(b)
            Probe.AddView(b, v)
            Probe.AddCandidates(b, cv)
            Probe.AddQuestionText(b, q)
            return Probe.End(b)
        return self._command(Payload.Payload.Probe, build)["request"]

    def events(self, request):
        """Yields the request's events until (and including) RequestFinished."""
        while True:
            mine = [e for e in self.pending if e.get("request") == request]
            self.pending = [e for e in self.pending if e.get("request") != request]
            for e in mine:
                yield e
                if e["kind"] == "RequestFinished":
                    return
            self.pending.append(decode(self.sock.recv()))

    def wait(self, request):
        """Runs a request to its end; returns its RequestFinished event."""
        last = None
        for last in self.events(request):
            pass
        return last
