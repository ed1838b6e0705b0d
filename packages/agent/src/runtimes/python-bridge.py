"""The Python side of a code context (packages/agent/src/services/code-runtimes.ts says more).

Run as `python3 -I -c <this text> <python-charts.py's text>` by the sandbox user: starts an
ipykernel through jupyter_client and speaks JSON lines on stdin and stdout. In:
{"op":"run","id","code","env"?}, {"op":"interrupt"}.
Out: ready, fatal, stream, display, error, done, died (BridgeMessage in code-kernel.ts).
"""
import json, os, queue, re, signal, subprocess, sys, tempfile, threading, time

STREAM_PIECE = 1 << 20
OUTPUT_HEAD = OUTPUT_TAIL = int(os.environ.get('WARREN_CODE_OUTPUT_CAP', str(4 << 20)))
VALUE_CAP = int(os.environ.get('WARREN_CODE_VALUE_CAP', str(4 << 20)))
MIME = re.compile(r'[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}\Z')
MAX_MIMES = 64
MAX_MSG = 64 << 20
VALUE_NOTE = '[%s output of %d bytes omitted: over the %d-byte cap]'
ANSI = re.compile(r'\x1b\[[0-9;?]*[A-Za-z]')
TOKEN = os.urandom(12).hex()
GAP = re.compile('\x1e' + TOKEN + r':(\d{1,16})\x1e')
out_lock = threading.Lock()
out = open(1, 'w', encoding='utf-8', closefd=False)

# Runs inside the kernel (exec_lines, in a namespace of its own): ipykernel holds everything a
# cell writes between two flushes, so a fast gigabyte of print would fill the kernel's memory.
# Per cell and stream, the first OUTPUT_HEAD characters pass, the last OUTPUT_TAIL are held and
# sent when the cell ends, and the UTF-8 bytes of the middle are counted and reported with a
# marker the bridge takes out of the text. It also reads what processes write to file descriptors
# 1 and 2 itself: ipykernel's reader decodes strictly and stops at the first invalid UTF-8 byte,
# after which a writer blocks once the pipe is full; this one decodes with replacement. And it
# drops a display value over VALUE_CAP before ipykernel serializes it: a 100 MB display would
# otherwise be held as value, JSON text and message at once, past a small sandbox's memory.
CAP_MODULE = r'''
import codecs, os, sys, threading
from collections import deque
from IPython import get_ipython
from ipykernel.iostream import OutStream
from ipykernel.zmqshell import ZMQDisplayPublisher, ZMQShellDisplayHook

HEAD = @HEAD@
TAIL = @TAIL@
VALUE_CAP = @VALUE_CAP@
VALUE_NOTE = @VALUE_NOTE@
GAP = '\x1e@TOKEN@:%d\x1e'
CHUNK = 1 << 16
original = OutStream.write


def utf8_len(text, start, end):
    if text.isascii():
        return end - start
    return sum(len(text[i:min(end, i + (1 << 20))].encode('utf-8', 'surrogatepass')) for i in range(start, end, 1 << 20))


class Cap:
    def __init__(self):
        self.lock = threading.RLock()
        self.reset()

    def reset(self):
        self.passed, self.tail, self.small, self.small_len, self.tail_len, self.dropped = 0, deque(), [], 0, 0, 0

    def seal(self):
        if self.small:
            self.tail.append(''.join(self.small))
            self.small, self.small_len = [], 0

    def add(self, stream, text):
        n, start = len(text), 0
        if self.passed < HEAD:
            start = min(n, HEAD - self.passed)
            self.passed += start
            original(stream, text if start == n else text[:start])
            if start == n:
                return
        if n - start > TAIL:
            self.seal()
            for piece in self.tail:
                self.dropped += utf8_len(piece, 0, len(piece))
            self.tail.clear()
            self.tail_len = 0
            self.dropped += utf8_len(text, start, n - TAIL)
            start = n - TAIL
        piece = text[start:] if start else text
        self.tail_len += len(piece)
        if len(piece) >= CHUNK:
            self.seal()
            self.tail.append(piece)
        else:
            self.small.append(piece)
            self.small_len += len(piece)
            if self.small_len >= CHUNK:
                self.seal()
        while self.tail and self.tail_len - len(self.tail[0]) >= TAIL:
            first = self.tail.popleft()
            self.tail_len -= len(first)
            self.dropped += utf8_len(first, 0, len(first))

    def finish(self, stream):
        self.seal()
        text = ''.join(self.tail)
        extra = len(text) - TAIL
        if extra > 0:
            self.dropped += utf8_len(text, 0, extra)
            text = text[extra:]
        dropped = self.dropped
        self.reset()
        if dropped:
            original(stream, GAP % dropped)
        if text:
            original(stream, text)


caps = {'stdout': Cap(), 'stderr': Cap()}


def write(self, string):
    cap = caps.get(getattr(self, 'name', None))
    if cap is None or not isinstance(string, str) or not self._is_master_process():
        return original(self, string)
    with cap.lock:
        cap.add(self, string)
    return len(string)


def finish(*args):
    for name, cap in caps.items():
        stream = getattr(sys, name, None)
        if isinstance(stream, OutStream):
            with cap.lock:
                cap.finish(stream)


def read_fd(number, stream):
    r, w = os.pipe()
    os.dup2(w, number)
    os.close(w)
    decoder = codecs.getincrementaldecoder('utf-8')(errors='replace')

    def loop():
        while True:
            try:
                data = os.read(r, 1 << 16)
            except OSError:
                return
            if not data:
                return
            text = decoder.decode(data)
            if text:
                stream.write(text)

    threading.Thread(target=loop, name='warren-fd-%d' % number, daemon=True).start()


def clip(data, metadata):
    if not isinstance(data, dict) or not any(isinstance(v, (str, bytes)) and len(v) > VALUE_CAP for v in data.values()):
        return data, metadata
    kept, notes = {}, []
    for mime, value in data.items():
        if isinstance(value, (str, bytes)) and len(value) > VALUE_CAP:
            notes.append(VALUE_NOTE % (mime, len(value), VALUE_CAP))
        else:
            kept[mime] = value
    plain = kept.get('text/plain')
    kept['text/plain'] = '\n'.join(([plain] if isinstance(plain, str) else []) + notes)
    return kept, dict(metadata or {}, **{'warren/clipped': True})


publish = ZMQDisplayPublisher.publish
write_format_data = ZMQShellDisplayHook.write_format_data


def clipped_publish(self, data, metadata=None, *args, **kwargs):
    data, metadata = clip(data, metadata)
    return publish(self, data, metadata, *args, **kwargs)


def clipped_format_data(self, format_dict, md_dict=None):
    format_dict, md_dict = clip(format_dict, md_dict)
    return write_format_data(self, format_dict, md_dict)


ZMQDisplayPublisher.publish = clipped_publish
ZMQShellDisplayHook.write_format_data = clipped_format_data
OutStream.write = write
for number, name in ((1, 'stdout'), (2, 'stderr')):
    stream = getattr(sys, name, None)
    if isinstance(stream, OutStream) and getattr(stream, '_fid', None) is not None:
        read_fd(number, stream)
get_ipython().events.register('pre_run_cell', finish)
get_ipython().events.register('post_run_cell', finish)
'''


def send(obj):
    line = json.dumps(obj, ensure_ascii=True, separators=(',', ':'))
    with out_lock:
        out.write(line + '\n')
        out.flush()


def send_stream(rid, name, text):
    # The kernel's gap markers become messages of their own (no text, the bytes left out), and
    # the text goes in pieces, so one line stays far below what the daemon reads.
    start = 0
    for gap in GAP.finditer(text):
        send_pieces(rid, name, text[start:gap.start()])
        send({'t': 'stream', 'id': rid, 'name': name, 'text': '', 'omitted': int(gap.group(1))})
        start = gap.end()
    send_pieces(rid, name, text[start:] if start else text)


def send_pieces(rid, name, text):
    for i in range(0, len(text), STREAM_PIECE):
        send({'t': 'stream', 'id': rid, 'name': name, 'text': text[i:i + STREAM_PIECE], 'omitted': 0})


def clip_display(data):
    # Output names are the cell's to choose: only MIME type names (RFC 6838's characters and
    # lengths) pass, at most MAX_MIMES of them, and names count against the bundle's size.
    kept: dict = {}
    notes, total, unnamed = [], 0, 0
    for mime, value in (data.items() if isinstance(data, dict) else ()):
        if not isinstance(mime, str) or not MIME.match(mime) or len(kept) >= MAX_MIMES:
            unnamed += 1
            continue
        try:
            size = len(value) if isinstance(value, str) else len(json.dumps(value))
        except Exception:
            unnamed += 1
            continue
        total += size + len(mime)
        if size > VALUE_CAP or total > 2 * VALUE_CAP:
            notes.append(VALUE_NOTE % (mime, size, VALUE_CAP))
        else:
            kept[mime] = value
    if unnamed:
        notes.append('[%d outputs omitted: their names are not MIME types, or a bundle has more than %d]' % (unnamed, MAX_MIMES))
    if notes:
        kept['text/plain'] = '\n'.join(([kept['text/plain']] if isinstance(kept.get('text/plain'), str) else []) + notes)
    return kept, bool(notes)


def clip_text(text, cap):
    text = str(text)
    return text if len(text) <= cap else '%s[... %d characters omitted]' % (text[:cap], len(text) - cap)


def main():
    private = tempfile.mkdtemp(prefix='warren-kernel-')
    for name, sub in (('JUPYTER_RUNTIME_DIR', 'runtime'), ('IPYTHONDIR', 'ipython'), ('MPLCONFIGDIR', 'matplotlib'), ('JUPYTER_DATA_DIR', 'data')):
        os.environ[name] = os.path.join(private, sub)
        os.makedirs(os.environ[name], mode=0o700, exist_ok=True)
    os.environ['JUPYTER_PLATFORM_DIRS'] = '1'
    os.environ['PYDEVD_DISABLE_FILE_VALIDATION'] = '1'
    os.environ.setdefault('MPLBACKEND', 'module://matplotlib_inline.backend_inline')
    try:
        import zmq
        from jupyter_client.manager import KernelManager
    except Exception as err:
        send({'t': 'fatal', 'message': 'the Python kernel is not installed in this image (python3-ipykernel): %s' % err})
        return 3
    cap_file = os.path.join(private, 'output_cap.py')
    with open(cap_file, 'w') as f:
        f.write(CAP_MODULE.replace('@HEAD@', str(OUTPUT_HEAD)).replace('@TAIL@', str(OUTPUT_TAIL)).replace('@TOKEN@', TOKEN)
                .replace('@VALUE_CAP@', str(VALUE_CAP)).replace('@VALUE_NOTE@', repr(VALUE_NOTE)))
    startup = '__import__("runpy").run_path(%r, run_name="__warren_output_cap__");' % cap_file
    # The chart and table formats (python-charts.py, the daemon's second argument): a kernel that
    # cannot load them still runs cells, without those formats.
    if len(sys.argv) > 1 and sys.argv[1]:
        charts_file = os.path.join(private, 'charts.py')
        with open(charts_file, 'w') as f:
            f.write(sys.argv[1])
        startup += '\ntry:\n    __import__("runpy").run_path(%r, run_name="__warren_charts__")\nexcept Exception:\n    pass' % charts_file
    km = KernelManager(kernel_name='python3')
    km.context.setsockopt(zmq.MAXMSGSIZE, MAX_MSG)
    try:
        km.start_kernel(extra_arguments=['--InteractiveShell.colors=NoColor', '--HistoryManager.enabled=False', '--IPKernelApp.exec_lines', startup],
                        cwd=os.getcwd(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=60)  # type: ignore[attr-defined]  # the blocking client's, made at run time
    except Exception as err:
        send({'t': 'fatal', 'message': 'the Python kernel did not start: %s' % err})
        try:
            km.shutdown_kernel(now=True)
        except Exception:
            pass
        return 3
    send({'t': 'ready', 'pid': km.provisioner.pid if km.provisioner else None})  # type: ignore[attr-defined]  # the local provisioner's
    jobs: queue.Queue = queue.Queue()

    def reader():
        for line in sys.stdin:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get('op') == 'interrupt':
                try:
                    km.interrupt_kernel()
                except Exception:
                    pass
            else:
                jobs.put(msg)
        jobs.put({'op': 'shutdown'})

    threading.Thread(target=reader, daemon=True).start()
    while True:
        try:
            job = jobs.get(timeout=0.5)
        except queue.Empty:
            if not km.is_alive():
                send({'t': 'died', 'message': 'the kernel process exited'})
                return 4
            continue
        if job.get('op') != 'run':
            break
        if not run(km, kc, job):
            send({'t': 'died', 'message': 'the kernel process exited during the run'})
            return 4
    try:
        km.shutdown_kernel(now=True)
    except Exception:
        pass
    return 0


# A run's `env`: set in the kernel's os.environ by a silent cell (no execution count, no output)
# before the run, and the previous values put back by another after it.
ENV_SET = ("__import__('builtins').__dict__.__setitem__('__warren_env__', {k: __import__('os').environ.get(k) for k in %r})"
           " or __import__('os').environ.update(%r)")
ENV_RESTORE = ("[__import__('os').environ.pop(k, None) if v is None else __import__('os').environ.__setitem__(k, v)"
               " for k, v in __import__('builtins').__dict__.pop('__warren_env__', {}).items()]")


def quiet(km, kc, code):
    msg_id = kc.execute(code, silent=True, store_history=False, allow_stdin=False)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and km.is_alive():
        try:
            reply = kc.get_shell_msg(timeout=0.2)
        except queue.Empty:
            continue
        if reply.get('parent_header', {}).get('msg_id') == msg_id:
            return


def run(km, kc, job):
    env = job.get('env')
    env = {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}
    if env:
        quiet(km, kc, ENV_SET % (list(env), env))
    try:
        return run_cell(km, kc, job)
    finally:
        if env and km.is_alive():
            quiet(km, kc, ENV_RESTORE)


def run_cell(km, kc, job):
    rid = job.get('id')
    msg_id = kc.execute(str(job.get('code', '')), store_history=True, allow_stdin=False, stop_on_error=False)
    # idle_wait is read only once replied is set, and set with it.
    replied, idle, count, status, idle_wait = False, False, None, 'ok', 0.0
    while not (replied and idle):
        got = False
        try:
            msg = kc.get_iopub_msg(timeout=0.1)
            got = True
            if msg.get('parent_header', {}).get('msg_id') == msg_id:
                try:
                    iopub(rid, msg)
                except Exception as err:
                    send({'t': 'stream', 'id': rid, 'name': 'stderr', 'text': '[an output the kernel sent could not be read and was left out: %s]\n' % clip_text(err, 200), 'omitted': 0})
                kind, content = msg['header']['msg_type'], msg['content']
                if kind == 'status' and content.get('execution_state') == 'idle':
                    idle = True
                elif kind == 'execute_input':
                    count = content.get('execution_count', count)
        except queue.Empty:
            pass
        if not replied:
            try:
                reply = kc.get_shell_msg(timeout=0)
                if reply.get('parent_header', {}).get('msg_id') == msg_id:
                    replied = True
                    count = reply['content'].get('execution_count', count)
                    status = reply['content'].get('status', 'ok')
                    idle_wait = time.monotonic() + 2
            except queue.Empty:
                pass
        if replied and not idle and not got and time.monotonic() > idle_wait:
            break  # the idle status was lost (an over-size message dropped the connection)
        if not got and not km.is_alive():
            return False
    send({'t': 'done', 'id': rid, 'count': count, 'status': status})
    return True


def iopub(rid, msg):
    kind, content = msg['header']['msg_type'], msg['content']
    if kind == 'stream':
        send_stream(rid, 'stderr' if content.get('name') == 'stderr' else 'stdout', str(content.get('text', '')))
    elif kind in ('execute_result', 'display_data'):
        data, clipped = clip_display(content.get('data') or {})
        metadata = content.get('metadata')
        clipped = clipped or isinstance(metadata, dict) and metadata.get('warren/clipped') is True  # clipped in the kernel
        send({'t': 'display', 'id': rid, 'main': kind == 'execute_result', 'data': data, 'clipped': clipped})
    elif kind == 'error':
        tb = [ANSI.sub('', str(line)) for line in content.get('traceback') or []]
        send({'t': 'error', 'id': rid, 'name': clip_text(content.get('ename', ''), 1000), 'value': clip_text(content.get('evalue', ''), STREAM_PIECE),
              'traceback': '\n'.join(tb)[-STREAM_PIECE:]})


if __name__ == '__main__':
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(main())
