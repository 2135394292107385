//! Random-number streams for a map: element `i` of a map gets the `i`-th
//! L'Ecuyer-CMRG stream after the map's seed, as `parallel::nextRNGStream()`
//! applied `i` times would give, whatever worker runs it and in whatever order.
//! Jumping ahead `i` streams is a product of 3x3 matrices modulo the two
//! moduli of MRG32k3a (powers of the one-stream jump by repeated squaring).

const M1: u64 = 4_294_967_087;
const M2: u64 = 4_294_944_443;

/// The jump of one stream (2^127 steps) for each component (L'Ecuyer, Simard,
/// Chen & Kelton 2002, as in R's parallel package).
const A1P127: [[u64; 3]; 3] = [
    [2_427_906_178, 3_580_155_704, 949_770_784],
    [226_153_695, 1_230_515_664, 3_580_155_704],
    [1_988_835_001, 986_791_581, 1_230_515_664],
];
const A2P127: [[u64; 3]; 3] = [
    [1_464_411_153, 277_697_599, 1_610_723_613],
    [32_183_930, 1_464_411_153, 1_022_607_788],
    [2_824_425_944, 32_183_930, 2_093_834_863],
];

type Mat = [[u64; 3]; 3];

fn mul(a: &Mat, b: &Mat, m: u64) -> Mat {
    let mut c = [[0u64; 3]; 3];
    for (i, row) in c.iter_mut().enumerate() {
        for (j, cell) in row.iter_mut().enumerate() {
            let mut s: u128 = 0;
            for (k, bk) in b.iter().enumerate() {
                s += a[i][k] as u128 * bk[j] as u128;
            }
            *cell = (s % m as u128) as u64;
        }
    }
    c
}

fn pow(a: &Mat, mut e: u64, m: u64) -> Mat {
    let mut result = [[1, 0, 0], [0, 1, 0], [0, 0, 1]];
    let mut base = *a;
    while e > 0 {
        if e & 1 == 1 {
            result = mul(&result, &base, m);
        }
        base = mul(&base, &base, m);
        e >>= 1;
    }
    result
}

fn apply(a: &Mat, v: [u64; 3], m: u64) -> [u64; 3] {
    let mut out = [0u64; 3];
    for (i, o) in out.iter_mut().enumerate() {
        let s: u128 = (0..3).map(|k| a[i][k] as u128 * v[k] as u128).sum();
        *o = (s % m as u128) as u64;
    }
    out
}

/// The state `.Random.seed[2:7]` of stream `n` after `state` (n = 0: `state`
/// itself), as unsigned 32-bit words.
pub fn stream_after(state: [u32; 6], n: u64) -> [u32; 6] {
    let x = apply(&pow(&A1P127, n, M1), [state[0] as u64, state[1] as u64, state[2] as u64], M1);
    let y = apply(&pow(&A2P127, n, M2), [state[3] as u64, state[4] as u64, state[5] as u64], M2);
    [x[0] as u32, x[1] as u32, x[2] as u32, y[0] as u32, y[1] as u32, y[2] as u32]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_jumps_is_the_same_stream_and_jumps_compose() {
        let s = [12345, 23456, 34567, 45678, 56789, 67890];
        assert_eq!(stream_after(s, 0), s);
        assert_eq!(stream_after(stream_after(s, 3), 4), stream_after(s, 7));
        assert_eq!(stream_after(stream_after(s, 1), 1000), stream_after(s, 1001));
    }
}
