import sys, json, jupyter_client, time
d, code = sys.argv[1], sys.argv[2]   # d: dir holding the conn file and sockets (host path)
import glob
cf = [f for f in glob.glob(d + '/*.json')][0]
info = json.load(open(cf))
info['ip'] = cf[:-5]   # ipc base path, host view
kc = jupyter_client.BlockingKernelClient()
kc.load_connection_info(info)
kc.start_channels()
t=time.time()
kc.wait_for_ready(timeout=20)
r = kc.execute_interactive(code, timeout=20, output_hook=lambda m: print(m['msg_type'], m['content'].get('text', m['content'].get('data', {}).get('text/plain', m['content'].get('evalue','')))) if m['msg_type'] in ('stream','execute_result','error') else None)
print('status', r['content']['status'], 'in %.3fs' % (time.time()-t))
kc.stop_channels()
