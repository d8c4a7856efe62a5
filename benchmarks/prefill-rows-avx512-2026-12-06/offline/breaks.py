# Where the target leaves a copy in quote summaries: right after a sentence end, a comma, mid
# sentence or at the first copied token; and whether copies that reach punctuation go on past it
import collections
from look import tok, eos, find_match, recorded, LookupConfig
ends=collections.Counter(); cross=collections.Counter()
def is_end(t):
    s=tok.decode([t])
    return s.strip().endswith((".", "?", "!", '."', ".\"")) 
def is_comma(t): return tok.decode([t]).strip().endswith((",",";",":"))
for seed, pid, ids, tokens in recorded(("match-avx512-2026-12-05/ge*", "borrow-avx512-2026-12-05/*ge1[135]"), "lee"):
    s=ids.numel(); end=s
    while end<tokens.numel():
        f=find_match(tokens[:end], LookupConfig(128,2,"longest"), eos); run=0
        if f is not None:
            c=f.continuation.tolist()
            while run<len(c) and end+run<tokens.numel() and c[run]==tokens[end+run]: run+=1
            # for each sentence end / comma inside the offered copy within the accepted run + the break position
            for j in range(min(run+1,len(c))):
                if j<len(c)-1 and end+j < tokens.numel():
                    kind = "end" if is_end(c[j]) else ("comma" if is_comma(c[j]) else None)
                    if kind and j < run:  # copied token j accepted, is punctuation
                        cross[(kind, f.agreement>=16, (j+1)<run)] += 1
            if run < len(c) and end+run < tokens.numel():
                prev = c[run-1] if run>0 else None
                kind = "end" if prev is not None and is_end(prev) else ("comma" if prev is not None and is_comma(prev) else ("start" if run==0 else "mid"))
                ends[kind]+=1
        end+=run+1
print("break right after:", dict(ends))
for k,v in sorted(cross.items()): print(k, v)
