# name: compute
# tries: a short computation (primes below 200000)
# must: run it to the end within the limits
# expect: *=ok
def primes(n):
    sieve = bytearray([1]) * n
    sieve[0:2] = b"\0\0"
    for i in range(2, int(n ** 0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(range(i * i, n, i)))
    return [i for i, p in enumerate(sieve) if p]

ps = primes(200_000)
print(f"{len(ps)} primes below 200000, the last is {ps[-1]}")
